#include "broker/store/usage_days.hpp"

#include <gtest/gtest.h>

namespace kiln::broker {
namespace {

TEST(UsageDays, TimesMapToTheirUtcDay) {
  EXPECT_EQ(UtcDayOf(0), 0);
  EXPECT_EQ(UtcDateOf(0), "1970-01-01");
  EXPECT_EQ(UtcDayOf(86399999), 0);
  EXPECT_EQ(UtcDayOf(86400000), 1);
  // 2026-11-27T23:59:59.999Z and the next millisecond.
  EXPECT_EQ(UtcDateOf(UtcDayOf(1795823999999)), "2026-11-27");
  EXPECT_EQ(UtcDateOf(UtcDayOf(1795824000000)), "2026-11-28");
  EXPECT_EQ(UtcDateOf(UtcDayOf(951782400000)), "2000-02-29");  // a leap day
}

TEST(UsageDays, DatesParseBackAndBadOnesNameTheField) {
  for (const char* date : {"1970-01-01", "2000-02-29", "2026-11-27", "9999-12-31"}) {
    auto day = ParseUtcDate(date, "from");
    ASSERT_TRUE(day.ok()) << date << ": " << day.status().ToString();
    EXPECT_EQ(UtcDateOf(*day), date);
  }
  for (const char* bad :
       {"", "2026-11-3", "2026-13-01", "2026-02-29", "2026-00-10", "1969-12-31", "2026/11/27",
        "+026-11-27", "2026-1a-27", "2026-11-27T00", "-2026-11-2"}) {
    auto day = ParseUtcDate(bad, "from");
    ASSERT_FALSE(day.ok()) << bad;
    EXPECT_EQ(day.status().code(), common::Code::kInvalidRequest);
    EXPECT_EQ(day.status().message().rfind("from: ", 0), 0u) << day.status().message();
  }
}

}  // namespace
}  // namespace kiln::broker
