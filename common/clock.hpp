// Clocks and ids shared by all components. Any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace kiln::common {

// Milliseconds since the Unix epoch (wall clock: for records and Redis).
inline int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Monotonic time, for timeouts and durations.
using SteadyClock = std::chrono::steady_clock;
inline double MsSince(SteadyClock::time_point start) {
  return std::chrono::duration<double, std::milli>(SteadyClock::now() - start).count();
}

// A fresh random id "<prefix><20 chars of [0-9a-z]>" (~103 bits from the OS
// entropy pool via a per-thread generator), e.g. NewId("ex_").
std::string NewId(const std::string& prefix);

}  // namespace kiln::common
