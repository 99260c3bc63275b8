// LogLimiter: keeps a log line that an untrusted party can trigger at will (a
// malformed frame, a full queue, an unknown worker) from flooding the logs. At
// most `lines` lines are written per `window`; the rest are only counted, and
// the next line written says how many were left out.
//
//   static common::LogLimiter limit(/*lines=*/10, std::chrono::seconds(10));
//   kLog.Warn(limit, {.worker = id}, "dropping a bad message: {}", why);
//
// SubsystemLog's overloads taking a LogLimiter (common/log/logging.hpp) append
// " (N similar lines suppressed)" when N > 0; Allow() is the primitive under
// them. Windows are fixed: the first allowed line opens one, and the first
// line after it ends opens the next.
//
// Threads: any thread (a small mutex guards the counters). One limiter per
// call site, usually a function-local static; the clock is injectable for
// tests.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>

namespace kiln::common {

class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  LogLimiter(uint32_t lines, Clock::duration window,
             std::function<Clock::time_point()> now = &Clock::now);
  LogLimiter(const LogLimiter&) = delete;
  LogLimiter& operator=(const LogLimiter&) = delete;
  LogLimiter(LogLimiter&&) = delete;
  LogLimiter& operator=(LogLimiter&&) = delete;
  ~LogLimiter() = default;

  // Empty: do not write this line (it is counted). Otherwise: write it; the
  // value is how many lines were suppressed since the last written one.
  std::optional<uint64_t> Allow();

 private:
  const uint32_t lines_;
  const Clock::duration window_;
  const std::function<Clock::time_point()> now_;

  std::mutex mu_;
  bool open_ = false;               // a window has started
  Clock::time_point window_start_;  // guarded by mu_
  uint32_t written_ = 0;            // in this window; guarded by mu_
  uint64_t suppressed_ = 0;         // since the last written line; guarded by mu_
};

}  // namespace kiln::common
