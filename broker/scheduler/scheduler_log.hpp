// The scheduler's log channels and the budgets of its rate-limited lines.
// Internal to broker/scheduler: for the Dispatcher's and JobFinisher's .cpp files.
#pragma once

#include <chrono>
#include <cstdint>

#include "common/log/logging.hpp"

namespace kiln::broker::scheduler_log {

// Scheduling and workers; one line per job end and per job mishap under "jobs".
inline const common::SubsystemLog kLog("scheduler");
inline const common::SubsystemLog kJobsLog("jobs");

// Lines a worker (or anyone who can reach the worker endpoint) can trigger at
// will go through a LogLimiter: this many per window at each call site.
inline constexpr uint32_t kHostileLines = 10;
// Registrations and disconnects are routine: a roomier budget, so a
// cluster's start is logged in full.
inline constexpr uint32_t kRoutineLines = 100;
inline constexpr auto kLogWindow = std::chrono::seconds(10);

}  // namespace kiln::broker::scheduler_log
