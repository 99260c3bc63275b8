// UTC calendar days as the usage ledger names them ("2026-11-27"): the day of
// a time, a day parsed from a client, and the days of a range. The finish
// script adds each ended job to its tenant's day (keys::Usage); GET
// /v1/usage reads them back. Pure; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.hpp"

namespace kiln::broker {

// Days since 1970-01-01 (UTC) of a time in ms since the Unix epoch.
int64_t UtcDayOf(int64_t ms);
// "YYYY-MM-DD" of a day number.
std::string UtcDateOf(int64_t day);
// The day number of "YYYY-MM-DD" (a real date, years 1970-9999);
// INVALID_REQUEST naming `field` otherwise.
common::StatusOr<int64_t> ParseUtcDate(std::string_view text, std::string_view field);

// How long a day's usage is kept: a little over a year, so a year's bills
// can be read back.
inline constexpr int64_t kUsageDaysKept = 400;

}  // namespace kiln::broker
