#include "common/clock.hpp"

#include <random>

namespace kiln::common {

std::string NewId(const std::string& prefix) {
  static constexpr char kAlphabet[] = "0123456789abcdefghijklmnopqrstuvwxyz";
  thread_local std::mt19937_64 rng = [] {
    std::random_device rd;
    std::seed_seq seq{rd(), rd(), rd(), rd(), rd(), rd(), rd(), rd()};
    return std::mt19937_64(seq);
  }();
  std::string id = prefix;
  for (int i = 0; i < 20; ++i) id += kAlphabet[rng() % 36];
  return id;
}

}  // namespace kiln::common
