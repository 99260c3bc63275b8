#include "broker/service/rate_limiter.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kiln::broker {

TokenBucket::TokenBucket(double rate, uint32_t burst, Clock::time_point now)
    : rate_(rate), burst_(std::max<uint32_t>(burst, 1)), tokens_(burst_), last_(now) {}

TokenBucket::Clock::duration TokenBucket::Take(Clock::time_point now) {
  if (now > last_) {
    const double elapsed_s = std::chrono::duration<double>(now - last_).count();
    tokens_ = std::min<double>(burst_, tokens_ + elapsed_s * rate_);
    last_ = now;
  }
  if (tokens_ >= 1) {
    tokens_ -= 1;
    return Clock::duration::zero();
  }
  const double wait_s = (1 - tokens_) / rate_;
  return std::max<Clock::duration>(
      std::chrono::ceil<Clock::duration>(std::chrono::duration<double>(wait_s)),
      Clock::duration(1));
}

SubmitRateLimiter::SubmitRateLimiter(const BrokerConfig& config, Now now) : now_(std::move(now)) {
  const Clock::time_point start = now_();
  for (const TenantConfig& t : config.tenants) {
    const double rate = TenantSubmitRate(config, t);
    if (rate > 0) buckets_.emplace(t.name, TokenBucket(rate, TenantSubmitBurst(config, t), start));
  }
}

SubmitRateLimiter::Verdict SubmitRateLimiter::Admit(const TenantConfig& tenant) {
  auto it = buckets_.find(tenant.name);  // the map never changes after construction
  if (it == buckets_.end()) return {};
  Clock::duration wait;
  {
    std::lock_guard lock(mu_);
    wait = it->second.Take(now_());
  }
  if (wait == Clock::duration::zero()) return {};
  char text[256];
  std::snprintf(text, sizeof text,
                "tenant %s submits more than %g jobs per second (burst %u) on this broker; "
                "retry in %.3g s",
                tenant.name.c_str(), it->second.rate(), it->second.burst(),
                std::chrono::duration<double>(wait).count());
  return {common::Status(common::Code::kRateLimited, text), wait};
}

}  // namespace kiln::broker
