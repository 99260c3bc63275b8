#include "common/rich_output.hpp"

#include <cstddef>
#include <utility>

namespace kiln::common {
namespace {

bool IsRestrictedNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '!' ||
         c == '#' || c == '$' || c == '&' || c == '^' || c == '_' || c == '.' || c == '+' ||
         c == '-';
}

bool IsRestrictedName(std::string_view s) {
  if (s.empty()) return false;
  const char first = s[0];
  if (!((first >= 'a' && first <= 'z') || (first >= 'A' && first <= 'Z') ||
        (first >= '0' && first <= '9'))) {
    return false;
  }
  for (char c : s) {
    if (!IsRestrictedNameChar(c)) return false;
  }
  return true;
}

}  // namespace

bool IsValidMime(std::string_view mime) {
  if (mime.size() > protocol::kMaxMimeBytes) return false;
  const size_t slash = mime.find('/');
  if (slash == std::string_view::npos) return false;
  return IsRestrictedName(mime.substr(0, slash)) && IsRestrictedName(mime.substr(slash + 1));
}

bool IsTextMime(std::string_view mime) {
  return mime.substr(0, 5) == "text/" || mime == "application/json";
}

bool BoundRichOutputs(std::vector<protocol::RichOutput>* outputs) {
  bool dropped = false;
  size_t total = 0;
  std::vector<protocol::RichOutput> kept;
  for (protocol::RichOutput& o : *outputs) {
    if (kept.size() >= protocol::kMaxRichOutputs || !IsValidMime(o.mime) ||
        o.data.size() > protocol::kMaxRichOutputBytes - total) {
      dropped = true;
      continue;
    }
    total += o.data.size();
    kept.push_back(std::move(o));
  }
  *outputs = std::move(kept);
  return dropped;
}

}  // namespace kiln::common
