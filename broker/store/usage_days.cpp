#include "broker/store/usage_days.hpp"

#include <charconv>
#include <chrono>
#include <cstdio>

namespace kiln::broker {
namespace {

using namespace std::chrono;

constexpr int64_t kMsPerDay = 86400000;

}  // namespace

int64_t UtcDayOf(int64_t ms) { return ms >= 0 ? ms / kMsPerDay : (ms - kMsPerDay + 1) / kMsPerDay; }

std::string UtcDateOf(int64_t day) {
  const year_month_day ymd{sys_days{days{day}}};
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04d-%02u-%02u", static_cast<int>(ymd.year()),
                static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()));
  return buf;
}

common::StatusOr<int64_t> ParseUtcDate(std::string_view text, std::string_view field) {
  const auto bad = [&] {
    return common::InvalidRequest(std::string(field) + ": expected a date YYYY-MM-DD, not '" +
                                  std::string(text.substr(0, 32)) + "'");
  };
  if (text.size() != 10 || text[4] != '-' || text[7] != '-') return bad();
  int y = 0;
  unsigned m = 0;
  unsigned d = 0;
  const auto part = [&](size_t at, size_t n, auto* out) {
    auto [p, ec] = std::from_chars(text.data() + at, text.data() + at + n, *out);
    return ec == std::errc() && p == text.data() + at + n;
  };
  if (!part(0, 4, &y) || !part(5, 2, &m) || !part(8, 2, &d)) return bad();
  const year_month_day ymd{year{y}, month{m}, day{d}};
  if (!ymd.ok() || y < 1970) return bad();
  return static_cast<int64_t>(sys_days{ymd}.time_since_epoch().count());
}

}  // namespace kiln::broker
