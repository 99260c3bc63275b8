// ResultAcks (pure logic): held per worker, taken with an Execute, due
// after kHold or at kMaxHeld.
#include "broker/scheduler/result_acks.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kiln::broker {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using Pair = std::pair<std::string, std::string>;

TEST(ResultAcks, HeldUntilAnExecuteToTheSameWorkerTakesThem) {
  ResultAcks acks;
  const auto t0 = ResultAcks::Clock::now();
  EXPECT_EQ(acks.NextDue(), std::nullopt);
  acks.Add("w1", "a", t0);
  acks.Add("w2", "b", t0);
  acks.Add("w1", "c", t0 + std::chrono::microseconds(500));
  EXPECT_THAT(acks.TakeDue(t0 + std::chrono::milliseconds(1)), IsEmpty());
  EXPECT_THAT(acks.TakeFor("w1"), ElementsAre("a", "c"));
  EXPECT_THAT(acks.TakeFor("w1"), IsEmpty());
  EXPECT_THAT(acks.TakeFor("w3"), IsEmpty());
  EXPECT_EQ(acks.NextDue(), t0 + ResultAcks::kHold);  // w2's
}

TEST(ResultAcks, DueOnceTheOldestIsHeldForKHold) {
  ResultAcks acks;
  const auto t0 = ResultAcks::Clock::now();
  acks.Add("w1", "a", t0);
  acks.Add("w2", "b", t0 + std::chrono::milliseconds(1));
  acks.Add("w1", "c", t0 + std::chrono::milliseconds(1));
  EXPECT_EQ(acks.NextDue(), t0 + ResultAcks::kHold);
  EXPECT_THAT(acks.TakeDue(t0 + ResultAcks::kHold - std::chrono::microseconds(1)), IsEmpty());
  // w1's oldest is due: all of w1's go; w2's wait for their own time.
  EXPECT_THAT(acks.TakeDue(t0 + ResultAcks::kHold), ElementsAre(Pair("w1", "a"), Pair("w1", "c")));
  EXPECT_EQ(acks.NextDue(), t0 + std::chrono::milliseconds(1) + ResultAcks::kHold);
  EXPECT_THAT(acks.TakeDue(ResultAcks::Clock::time_point::max()), ElementsAre(Pair("w2", "b")));
  EXPECT_EQ(acks.NextDue(), std::nullopt);
}

TEST(ResultAcks, AWorkerWithKMaxHeldIsDueAtOnce) {
  ResultAcks acks;
  const auto t0 = ResultAcks::Clock::now();
  for (size_t i = 0; i + 1 < ResultAcks::kMaxHeld; ++i) acks.Add("w1", std::to_string(i), t0);
  EXPECT_THAT(acks.TakeDue(t0), IsEmpty());
  acks.Add("w1", "last", t0);
  EXPECT_LE(*acks.NextDue(), t0);
  EXPECT_EQ(acks.TakeDue(t0).size(), ResultAcks::kMaxHeld);
  EXPECT_EQ(acks.NextDue(), std::nullopt);
}

}  // namespace
}  // namespace kiln::broker
