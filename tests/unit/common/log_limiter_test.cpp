// LogLimiter with a fake clock, alone and through SubsystemLog's rate-limited
// overloads (lines read back from the process's real stderr).
#include "common/log/log_limiter.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <thread>
#include <vector>

#include "common/log/logging.hpp"
#include "tests/unit/common/capture_stderr.hpp"

namespace kiln::common {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using Clock = LogLimiter::Clock;
using std::chrono::seconds;

// A clock the test moves by hand.
struct FakeClock {
  Clock::time_point now{};
  std::function<Clock::time_point()> fn() {
    return [this] { return now; };
  }
};

TEST(LogLimiter, WritesTheBudgetThenCountsUntilTheWindowEnds) {
  FakeClock clock;
  LogLimiter limit(3, seconds(10), clock.fn());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(limit.Allow(), std::optional<uint64_t>(0)) << i;
  for (int i = 0; i < 5; ++i) EXPECT_EQ(limit.Allow(), std::nullopt) << i;
  clock.now += seconds(9);
  EXPECT_EQ(limit.Allow(), std::nullopt) << "still the first window";
  clock.now += seconds(1);
  // A new window: its first line reports the six left out.
  EXPECT_EQ(limit.Allow(), std::optional<uint64_t>(6));
  EXPECT_EQ(limit.Allow(), std::optional<uint64_t>(0));
  EXPECT_EQ(limit.Allow(), std::optional<uint64_t>(0));
  EXPECT_EQ(limit.Allow(), std::nullopt);
  // A long quiet spell: the next line opens a window of its own.
  clock.now += seconds(3600);
  EXPECT_EQ(limit.Allow(), std::optional<uint64_t>(1));
}

TEST(LogLimiter, WindowStartsAtTheFirstLineNotAtConstruction) {
  FakeClock clock;
  LogLimiter limit(1, seconds(10), clock.fn());
  clock.now += seconds(100);
  EXPECT_EQ(limit.Allow(), std::optional<uint64_t>(0));
  clock.now += seconds(5);
  EXPECT_EQ(limit.Allow(), std::nullopt);
  clock.now += seconds(5);
  EXPECT_EQ(limit.Allow(), std::optional<uint64_t>(1));
}

// Many threads at once: exactly the budget is written, and every other call
// is counted once.
TEST(LogLimiter, CountsExactlyAcrossThreads) {
  FakeClock clock;
  LogLimiter limit(10, seconds(10), clock.fn());
  std::atomic<int> allowed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        if (limit.Allow()) ++allowed;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(allowed.load(), 10);
  clock.now += seconds(10);
  EXPECT_EQ(limit.Allow(), std::optional<uint64_t>(3990));
}

using testing::CaptureStderr;

TEST(LogLimiter, SubsystemLogSaysHowManyLinesItLeftOut) {
  LogOptions options;
  options.component = "broker";
  options.format = "text";
  ASSERT_TRUE(InitLogging(options).ok());
  const SubsystemLog log("native");
  FakeClock clock;
  LogLimiter limit(2, seconds(10), clock.fn());
  auto lines = CaptureStderr([&] {
    for (int i = 0; i < 10; ++i) log.Warn(limit, {.job = "j-1"}, "bad frame {}", i);
    clock.now += seconds(10);
    log.Warn(limit, {.job = "j-2"}, "bad frame {}", 10);
    log.Warn(limit, {}, "bad frame {}", 11);
    // Lines below the logger's level neither count nor spend the budget.
    log.Debug({}, "hidden");
  });
  ASSERT_EQ(lines.size(), 4u) << ::testing::PrintToString(lines);
  EXPECT_THAT(lines[0], EndsWith("[broker.native] bad frame 0 job=j-1"));
  EXPECT_THAT(lines[1], EndsWith("[broker.native] bad frame 1 job=j-1"));
  EXPECT_THAT(lines[2],
              EndsWith("[broker.native] bad frame 10 (8 similar lines suppressed) job=j-2"));
  EXPECT_THAT(lines[3], EndsWith("[broker.native] bad frame 11"));

  LogLimiter quiet(1, seconds(10), clock.fn());
  auto none = CaptureStderr([&] {
    for (int i = 0; i < 5; ++i) log.Log(quiet, spdlog::level::debug, {}, "below the level {}", i);
  });
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(quiet.Allow(), std::optional<uint64_t>(0)) << "debug lines spent nothing";
}

}  // namespace
}  // namespace kiln::common
