// BusyPoll: whether an execution's thread waits for its sandbox by polling
// without sleeping, and for how long. Only the Executor decides it (per
// execution, as it starts); the ExecutionDriver carries it out.
//
// On a virtual machine a vCPU that goes idle halts, and waking it again
// costs far more than on bare metal: on the 2-core Firecracker VM of
// docs/performance.md a paced one-shot job spent ~1.3 ms in its sandbox
// against ~0.5 ms when the worker's CPUs were kept awake. A job's thread
// that polls instead of sleeping keeps one CPU awake for the few hundred µs
// a small job takes. That pays only on a calm worker: when executions come
// back to back the CPUs are awake anyway and a spinning thread would take
// CPU from the sandboxes (measured: 8-30 % fewer executions per second). So
// a thread polls only when its execution is the only one running and the
// worker ran nothing for `calm` before it, for at most `window`; and only
// for one-shot jobs (a paced session statement gained nothing measurable).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

namespace kiln::worker {

struct BusyPoll {
  std::chrono::microseconds window{0};  // 0: never
  std::chrono::milliseconds calm{10};

  // How long an execution starting at `now` polls: `running` executions
  // (itself included), the last one before it having ended at `last_end`
  // (none yet: unset).
  template <typename TimePoint>
  std::chrono::microseconds For(uint32_t running, TimePoint now,
                                std::optional<TimePoint> last_end) const {
    if (window.count() <= 0 || running != 1) return std::chrono::microseconds(0);
    if (last_end && now - *last_end < calm) return std::chrono::microseconds(0);
    return window;
  }
};

}  // namespace kiln::worker
