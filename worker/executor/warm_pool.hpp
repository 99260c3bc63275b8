// WarmPool: sandboxes started before their job arrives, one small stock per
// runtime, so a job skips namespace, cgroup and interpreter start-up.
//
//   std::jthread refill([&](std::stop_token st) { pool.Run(st); });
//   ASSIGN_OR_RETURN(WarmSandbox sb, pool.Take(Language::kPython));  // ready or cold
//
// Every sandbox serves exactly one job and is destroyed afterwards (per-attempt
// isolation): the pool pre-builds, it never reuses. A sandbox that died while
// waiting is discarded at Take(). Take() is thread-safe; Run() is the refill
// loop and belongs to one thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <stop_token>

#include "common/clock.hpp"
#include "common/status.hpp"
#include "common/unique_fd.hpp"
#include "worker/runtimes/runtime.hpp"
#include "worker/sandbox/sandbox.hpp"

namespace kiln::worker {

class WorkerMetrics;

struct WarmSandbox {
  runtimes::Language language = runtimes::Language::kPython;
  std::unique_ptr<sandbox::SandboxProcess> process;
  // Worker ends of the pipes, non-blocking and close-on-exec.
  common::UniqueFd stdin_w, stdout_r, stderr_r, control_r;
  common::SteadyClock::time_point spawned_at;
  double spawn_ms = 0;  // how long Spawn took
};

class WarmPool {
 public:
  WarmPool(sandbox::Sandbox* sandbox, std::map<runtimes::Language, runtimes::Runtime> runtimes,
           sandbox::SandboxLimits launch_limits, size_t per_runtime,
           WorkerMetrics* metrics = nullptr);  // optional; outlives the pool

  // A ready sandbox when one is in stock (and asks the refill loop for
  // another), else one started now. RUNTIME_UNAVAILABLE for a runtime this
  // worker does not offer.
  common::StatusOr<WarmSandbox> Take(runtimes::Language language);
  // Starts one sandbox for `language` (what Take does when the stock is empty).
  common::StatusOr<WarmSandbox> SpawnOne(runtimes::Language language);
  // Starts a session sandbox: the language's REPL driver (never stocked).
  common::StatusOr<WarmSandbox> SpawnSession(runtimes::Language language);

  size_t Ready(runtimes::Language language) const;
  const std::map<runtimes::Language, runtimes::Runtime>& runtimes() const { return runtimes_; }
  sandbox::Sandbox* sandbox() const { return sandbox_; }

  // Keeps per_runtime sandboxes ready for every runtime until stop; then
  // destroys the stock.
  void Run(std::stop_token stop);

 private:
  sandbox::Sandbox* sandbox_;
  std::map<runtimes::Language, runtimes::Runtime> runtimes_;
  sandbox::SandboxLimits launch_limits_;
  size_t per_runtime_;
  WorkerMetrics* metrics_;

  mutable std::mutex mu_;
  std::condition_variable_any wake_;
  std::map<runtimes::Language, std::deque<WarmSandbox>> stock_;

  common::StatusOr<WarmSandbox> Spawn(runtimes::Language language, bool session);
  // Reports the stock of `language`; mu_ held.
  void PublishReady(runtimes::Language language);
};

}  // namespace kiln::worker
