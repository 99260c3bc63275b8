#include "broker/service/rate_limiter.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kiln::broker {
namespace {

using namespace std::chrono_literals;
using Clock = TokenBucket::Clock;
using ::testing::HasSubstr;

TEST(TokenBucket, StartsFullThenRefillsAtTheRate) {
  Clock::time_point t{};
  TokenBucket b(/*rate=*/2, /*burst=*/3, t);
  EXPECT_EQ(b.Take(t), 0ns);
  EXPECT_EQ(b.Take(t), 0ns);
  EXPECT_EQ(b.Take(t), 0ns);
  // Empty: one token takes 1/rate = 500 ms to come back.
  EXPECT_EQ(b.Take(t), 500ms);
  EXPECT_EQ(b.Take(t + 200ms), 300ms);  // a refused take costs nothing
  EXPECT_EQ(b.Take(t + 500ms), 0ns);
  EXPECT_EQ(b.Take(t + 500ms), 500ms);
  // A long pause refills up to the burst, no further.
  t += 1h;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(b.Take(t), 0ns) << i;
  EXPECT_GT(b.Take(t), 0ns);
}

TEST(TokenBucket, SlowRatesAndTheSmallestBurst) {
  Clock::time_point t{};
  TokenBucket b(/*rate=*/0.1, /*burst=*/0, t);  // burst 0 means 1
  EXPECT_EQ(b.burst(), 1u);
  EXPECT_EQ(b.Take(t), 0ns);
  EXPECT_EQ(b.Take(t), 10s);
  EXPECT_EQ(b.Take(t + 9s), 1s);
  EXPECT_EQ(b.Take(t + 10s), 0ns);
}

TEST(TokenBucket, SustainedRateIsTheConfiguredOne) {
  Clock::time_point t{};
  TokenBucket b(/*rate=*/100, /*burst=*/10, t);
  int taken = 0;
  for (int ms = 0; ms < 10'000; ++ms) {  // 10 s of one attempt per millisecond
    if (b.Take(t + std::chrono::milliseconds(ms)) == 0ns) ++taken;
  }
  EXPECT_NEAR(taken, 10 + 100 * 10, 2);
}

BrokerConfig Config() {
  BrokerConfig c;
  c.quotas.tenant_submit_rate = 1;  // default burst: twice the rate
  TenantConfig a;
  a.name = "a";
  TenantConfig fast;
  fast.name = "fast";
  fast.submit_rate = 10;
  fast.submit_burst = 5;
  c.tenants = {a, fast};
  return c;
}

TEST(SubmitRateLimiter, PerTenantBucketsFromTheConfig) {
  BrokerConfig c = Config();
  Clock::time_point now{};
  SubmitRateLimiter limiter(c, [&] { return now; });
  const TenantConfig& a = c.tenants[0];
  const TenantConfig& fast = c.tenants[1];
  EXPECT_TRUE(limiter.Admit(a).status.ok());
  EXPECT_TRUE(limiter.Admit(a).status.ok());
  auto refused = limiter.Admit(a);
  EXPECT_EQ(refused.status.code(), common::Code::kRateLimited);
  EXPECT_TRUE(common::IsRetryable(refused.status.code()));
  EXPECT_EQ(common::HttpStatusFor(refused.status.code()), 429);
  EXPECT_THAT(refused.status.message(), HasSubstr("tenant a submits more than 1 jobs per second"));
  EXPECT_THAT(refused.status.message(), HasSubstr("burst 2"));
  EXPECT_EQ(refused.retry_after, 1s);
  // Another tenant's bucket is its own.
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(limiter.Admit(fast).status.ok()) << i;
  EXPECT_EQ(limiter.Admit(fast).retry_after, 100ms);
  now += 1s;
  EXPECT_TRUE(limiter.Admit(a).status.ok());
  EXPECT_FALSE(limiter.Admit(a).status.ok());
}

TEST(SubmitRateLimiter, RateZeroIsNoLimit) {
  BrokerConfig c = Config();
  c.quotas.tenant_submit_rate = 0;
  Clock::time_point now{};
  SubmitRateLimiter limiter(c, [&] { return now; });
  for (int i = 0; i < 10'000; ++i) ASSERT_TRUE(limiter.Admit(c.tenants[0]).status.ok()) << i;
  // The tenant with its own rate is still limited.
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(limiter.Admit(c.tenants[1]).status.ok());
  EXPECT_FALSE(limiter.Admit(c.tenants[1]).status.ok());
}

}  // namespace
}  // namespace kiln::broker
