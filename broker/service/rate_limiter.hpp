// Per-tenant submission rate limits: a token bucket per tenant on each broker.
//
//   SubmitRateLimiter limiter(config);                  // buckets for every tenant with a rate
//   RETURN_IF_ERROR(limiter.Admit(*tenant).status);      // RATE_LIMITED over the rate
//
// A tenant with TenantSubmitRate(config, tenant) = r > 0 may submit r times
// per second on average and TenantSubmitBurst(config, tenant) = b times in a
// row (the bucket starts full); rate 0 is no limit. The limit is per broker:
// N brokers let a tenant through N times as often. I/O-free: time comes from
// the clock given at construction (tests pass their own).
//
// TokenBucket is plain data for one thread; SubmitRateLimiter is thread-safe
// (one mutex around the buckets; each call is a few arithmetic operations).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "broker/config.hpp"
#include "common/status.hpp"

namespace kiln::broker {

class TokenBucket {
 public:
  using Clock = std::chrono::steady_clock;

  // Full at `now`. rate > 0 tokens per second, burst >= 1 tokens at most.
  TokenBucket(double rate, uint32_t burst, Clock::time_point now);

  // Takes one token and returns zero, or takes nothing and returns how long
  // until a token will be there.
  Clock::duration Take(Clock::time_point now);

  double rate() const { return rate_; }
  uint32_t burst() const { return burst_; }

 private:
  double rate_;
  uint32_t burst_;
  double tokens_;
  Clock::time_point last_;
};

class SubmitRateLimiter {
 public:
  using Clock = TokenBucket::Clock;
  using Now = std::function<Clock::time_point()>;

  struct Verdict {
    common::Status status;          // OK, or RATE_LIMITED saying the rate
    Clock::duration retry_after{};  // with RATE_LIMITED: when a submit would pass
  };

  explicit SubmitRateLimiter(const BrokerConfig& config, Now now = Clock::now);

  // Counts one submit of `tenant` (any submit that got past authentication,
  // whatever happens to it next).
  Verdict Admit(const TenantConfig& tenant);

 private:
  Now now_;
  std::mutex mu_;
  std::map<std::string, TokenBucket, std::less<>> buckets_;  // tenants with a rate
};

}  // namespace kiln::broker
