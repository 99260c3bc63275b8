// WarmPool: sandboxes started before their job arrives, one small stock per
// runtime, so a job skips namespace, cgroup and interpreter start-up.
//
//   std::jthread refill([&](std::stop_token st) { pool.Run(st); });
//   ASSIGN_OR_RETURN(WarmSandbox sb, pool.Take(Language::kPython));  // ready or cold
//
// A python runtime with preloads has two stocks: sandboxes forked from the
// zygote with the preloads, and from the lean one (Runtime::OneShotLaunch);
// Take's `preloaded` picks (Runtime::NeedsPreload).
//
// Every sandbox serves exactly one job and is destroyed afterwards (per-attempt
// isolation): the pool pre-builds, it never reuses. A sandbox that died while
// waiting is discarded at Take(). Take() and JobDone() are thread-safe; Run()
// is the refill loop and belongs to one thread.
//
// When a job runs alone in a settled sandbox, the refill of the sandbox it
// took waits until the job is done (JobDone()) or refill_hold has passed,
// whichever comes first: a sandbox build and interpreter start next to a
// short job slowed it by a third on a 2-core host (docs/performance.md,
// "Warm-job cost"). While jobs overlap, or come faster than sandboxes start,
// the refill is not held: the stock matters more then.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <vector>

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
  // The worker's end of the sandbox's tool channel (its fd 6), non-blocking.
  common::UniqueFd tool;
  common::SteadyClock::time_point spawned_at;
  double spawn_ms = 0;  // how long Spawn took
};

// Longer than a trivial job (1-3 ms), short against an interpreter start
// (15-40 ms): a long job delays its replacement by this much at most.
inline constexpr std::chrono::milliseconds kRefillHold{10};
// A sandbox this long in the stock has started its interpreter (15-40 ms):
// only a job that found one holds the refill. Younger, and jobs come faster
// than sandboxes start; the refill must not wait then.
inline constexpr std::chrono::milliseconds kSettledAge{50};
// A session's driver lives across many executions, so its RLIMIT_CPU must
// not add them up (cpu_ms is enforced per execution from the cgroup): it is
// spawned with this one, and each execution sets it again (a hard limit
// can only be lowered, so the spawn's is the ceiling).
inline constexpr uint64_t kSessionCpuRlimitMs = 7ull * 24 * 3600 * 1000;

// A stock: one-shot sandboxes of a language, and whether they come from the
// preloaded zygote (always true for a runtime without preloads).
struct WarmKind {
  runtimes::Language language = runtimes::Language::kPython;
  bool preloaded = true;
  auto operator<=>(const WarmKind&) const = default;
};

class WarmPool {
 public:
  WarmPool(sandbox::Sandbox* sandbox, std::map<runtimes::Language, runtimes::Runtime> runtimes,
           sandbox::SandboxLimits launch_limits, size_t per_runtime,
           WorkerMetrics* metrics = nullptr,  // optional; outlives the pool
           std::chrono::milliseconds refill_hold = kRefillHold);

  // A ready sandbox of that kind when one is in stock, else the one the
  // refill loop is building (for one caller at a time), else one started
  // now. RUNTIME_UNAVAILABLE for a runtime this worker does not offer. Every
  // call, failed or not, is to be followed by one JobDone().
  common::StatusOr<WarmSandbox> Take(runtimes::Language language, bool preloaded = true);
  // The job that called Take() is over (its Result sent, its sandbox torn
  // down) or could not start: the refill may start now.
  void JobDone();
  // Whether the refill loop is building a sandbox of that kind now.
  bool Refilling(runtimes::Language language, bool preloaded = true) const;
  // Starts one sandbox of that kind (what Take does when the stock is empty).
  common::StatusOr<WarmSandbox> SpawnOne(runtimes::Language language, bool preloaded = true);
  // Starts a session sandbox: the language's REPL driver (never stocked).
  common::StatusOr<WarmSandbox> SpawnSession(runtimes::Language language);

  size_t Ready(runtimes::Language language, bool preloaded = true) const;
  const std::map<runtimes::Language, runtimes::Runtime>& runtimes() const { return runtimes_; }
  sandbox::Sandbox* sandbox() const { return sandbox_; }

  // Keeps per_runtime sandboxes ready of every kind until stop; then
  // destroys the stock.
  void Run(std::stop_token stop);

 private:
  sandbox::Sandbox* sandbox_;
  std::map<runtimes::Language, runtimes::Runtime> runtimes_;
  sandbox::SandboxLimits launch_limits_;
  size_t per_runtime_;
  WorkerMetrics* metrics_;
  std::chrono::milliseconds refill_hold_;
  std::vector<WarmKind> kinds_;  // every stock, lean python first

  mutable std::mutex mu_;
  std::condition_variable_any wake_;
  std::map<WarmKind, std::deque<WarmSandbox>> stock_;
  // The refill loop starts no sandbox before this; in the past when no hold
  // is in force.
  common::SteadyClock::time_point refill_at_{};
  size_t jobs_ = 0;  // Take() calls not yet followed by JobDone()
  // The kind the refill loop is building a sandbox of, if any, and whether
  // a Take() with an empty stock already waits for that one.
  std::optional<WarmKind> refilling_;
  bool refill_claimed_ = false;

  // `kind` as a stock's key: preloaded for a runtime without preloads.
  WarmKind KindOf(runtimes::Language language, bool preloaded) const;
  common::StatusOr<WarmSandbox> Spawn(WarmKind kind, bool session);
  // Reports the stock of `language`, its kinds added up; mu_ held.
  void PublishReady(runtimes::Language language);
  // Counts a job in; holds the refill if it is the only one and `taken` (the
  // sandbox it got, or null) had settled in the stock; mu_ held.
  void CountJob(const WarmSandbox* taken);
};

}  // namespace kiln::worker
