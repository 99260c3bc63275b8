#include "broker/job/isolation.hpp"

namespace kiln::broker {

bool IsIsolationLevel(std::string_view level) {
  return level == kStandardIsolation || level == kGvisorIsolation;
}

std::string_view NormalizeIsolation(std::string_view level) {
  return level.empty() ? kStandardIsolation : level;
}

std::string PlacementToken(std::string_view language, std::string_view level) {
  level = NormalizeIsolation(level);
  std::string token(language);
  if (level != kStandardIsolation) {
    token += '@';
    token += level;
  }
  return token;
}

std::string WireIsolation(std::string_view level) {
  level = NormalizeIsolation(level);
  return level == kStandardIsolation ? std::string() : std::string(level);
}

}  // namespace kiln::broker
