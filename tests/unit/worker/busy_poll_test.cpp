// BusyPoll's decision (worker/executor/busy_poll.hpp) on a hand-driven clock:
// only a lone execution on a calm worker polls, and only for the window.
#include "worker/executor/busy_poll.hpp"

#include <gtest/gtest.h>

namespace kiln::worker {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(BusyPoll, ALoneExecutionOnACalmWorkerPollsForTheWindow) {
  const BusyPoll p{.window = 2000us, .calm = 10ms};
  const Clock::time_point t0{};
  EXPECT_EQ(p.For(1, t0 + 1s, std::optional<Clock::time_point>()), 2000us) << "first execution";
  EXPECT_EQ(p.For(1, t0 + 1s, std::optional(t0)), 2000us) << "1 s after the last one";
  EXPECT_EQ(p.For(1, t0 + 10ms, std::optional(t0)), 2000us) << "exactly calm";
}

TEST(BusyPoll, BackToBackOrConcurrentExecutionsSleep) {
  const BusyPoll p{.window = 2000us, .calm = 10ms};
  const Clock::time_point t0{};
  EXPECT_EQ(p.For(1, t0 + 9ms, std::optional(t0)), 0us) << "the last one ended 9 ms ago";
  EXPECT_EQ(p.For(2, t0 + 1s, std::optional(t0)), 0us) << "another one runs";
  EXPECT_EQ(p.For(8, t0 + 1s, std::optional<Clock::time_point>()), 0us);
}

TEST(BusyPoll, AZeroWindowNeverPolls) {
  const BusyPoll p{.window = 0us, .calm = 10ms};
  EXPECT_EQ(p.For(1, Clock::time_point{} + 1s, std::optional<Clock::time_point>()), 0us);
}

}  // namespace
}  // namespace kiln::worker
