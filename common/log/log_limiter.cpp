#include "common/log/log_limiter.hpp"

#include <utility>

namespace kiln::common {

LogLimiter::LogLimiter(uint32_t lines, Clock::duration window,
                       std::function<Clock::time_point()> now)
    : lines_(lines), window_(window), now_(std::move(now)) {}

std::optional<uint64_t> LogLimiter::Allow() {
  const Clock::time_point now = now_();
  std::lock_guard lock(mu_);
  if (!open_ || now - window_start_ >= window_) {
    open_ = true;
    window_start_ = now;
    written_ = 0;
  }
  if (written_ >= lines_) {
    ++suppressed_;
    return std::nullopt;
  }
  ++written_;
  return std::exchange(suppressed_, 0);
}

}  // namespace kiln::common
