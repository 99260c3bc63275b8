// SessionTable: the worker's long-lived session sandboxes, one per session,
// each running its language's REPL driver (docs/runtimes.md, "Session
// drivers") so state survives between executions.
//
//   ASSIGN_OR_RETURN(SessionTable::Lease l, table.Acquire(execute));  // busy until Release
//   ... RunSessionExecution(execute, *l.session, ...) ...
//   table.Release(l.session, /*destroy=*/hung);
//
// A session is keyed by its id; the broker's `session_epoch` names its
// incarnation. A sandbox held under another epoch is replaced by a fresh one
// (the session was deleted and created again, or reset). When this worker
// has run the session under the same epoch before but no longer holds its
// sandbox (it expired here, died, or was destroyed), the Lease says
// `state_lost`: the broker must give the session a new epoch. Idle sandboxes
// are destroyed after the session's TTL (plus a margin: the broker's expiry
// comes first). Between executions a session is stopped (session_runner.hpp,
// FreezeBetweenExecutions): at once, or, with a stop delay, once it has been
// idle that long, on the table's own thread, so back-to-back executions pay
// neither the stop nor the resume (Rest). Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "common/protocol/messages.hpp"
#include "common/status.hpp"
#include "worker/executor/warm_pool.hpp"
#include "worker/packages/package_cache.hpp"
#include "worker/runtimes/runtime.hpp"

namespace kiln::worker {

struct SessionSandbox {
  std::string id;
  std::string tenant;
  runtimes::Language language = runtimes::Language::kPython;
  uint64_t epoch = 0;
  WarmSandbox sandbox;  // the driver process and the worker's pipe ends
  runtimes::ControlStream control{runtimes::Language::kPython};  // the driver's frames
  uint64_t executions = 0;
  uint64_t ttl_ms = 0;
  std::chrono::steady_clock::time_point last_used;
  bool busy = false;
  uint64_t idle_bytes = 0;  // memory it held when last released (frozen)
  // Whoever holds the session (busy) writes these; the table reads them
  // under its mutex while it is not busy.
  // Its processes are stopped (FreezeBetweenExecutions), not resumed since.
  bool stopped = false;
  // Left running after its last execution until `stop_due` (Rest with a
  // stop delay): its next execution needs no resume, and counts its CPU from
  // `cpu_at_end_ms`, the sandbox's CPU when the last one ended, so what ran
  // in between is that execution's.
  bool awake = false;
  std::optional<double> cpu_at_end_ms;
  std::chrono::steady_clock::time_point stop_due;
  bool stop_queued = false;  // in the table's deferred stops (with its mutex)
  // Packages on request mounted at /packages (sorted specs, every execution's
  // together) and the cache entry that holds them on the host.
  std::vector<std::string> packages;
  std::shared_ptr<const PackageSet> package_set;
};

// How much memory idle (frozen) session sandboxes may hold; 0: no bound.
struct IdleSessionBudget {
  uint64_t worker_bytes = 0;  // all tenants together
  uint64_t tenant_bytes = 0;  // each tenant
};

class SessionTable {
 public:
  // Idle sandboxes live this much longer than the broker's TTL for them.
  static constexpr std::chrono::seconds kTtlMargin{30};

  // `stop_after`: how long a session stays running after an execution
  // before it is stopped (Rest); 0: at once.
  explicit SessionTable(WarmPool* pool, IdleSessionBudget budget = {},
                        std::chrono::milliseconds stop_after = {});
  ~SessionTable();
  SessionTable(const SessionTable&) = delete;
  SessionTable& operator=(const SessionTable&) = delete;

  struct Lease {
    std::shared_ptr<SessionSandbox> session;
    bool state_lost = false;  // ran here before under this epoch, but its state is gone
  };
  // The session's sandbox, marked busy; started now if needed (a cold start).
  // While it is busy, waits up to kBusyWait for the running execution to
  // release it (it freezes the session after its Result has left, and the
  // broker sends the next execution on that Result); UNAVAILABLE after that
  // (the broker runs one execution per session at a time: a duplicate).
  common::StatusOr<Lease> Acquire(const common::protocol::Execute& job);
  // Marks it idle again, or destroys it (its state is unusable). An idle
  // session's memory counts against the budget: past it, the least recently
  // used idle sessions (of the tenant, for the tenant's budget) are destroyed
  // like expired ones (their next execution starts a fresh interpreter,
  // `session_reset`). Returns how many were reclaimed.
  size_t Release(const std::shared_ptr<SessionSandbox>& session, bool destroy);
  // After an execution that left the sandbox usable, off its Result's path:
  // stops the session until its next execution and releases it. With a stop
  // delay the session is released running (awake) and stopped once it has
  // been idle that long, unless an execution took it first. A session that
  // cannot be stopped is destroyed. Returns what Release returns.
  size_t Rest(const std::shared_ptr<SessionSandbox>& session);
  // Memory held by idle sessions now (as of their release).
  uint64_t IdleBytes() const;
  // The session was deleted: destroy its sandbox (at once if idle, else when
  // the running execution releases it).
  void Close(const std::string& id);
  // Destroys sandboxes idle longer than their TTL; returns how many.
  size_t ExpireIdle(std::chrono::steady_clock::time_point now);
  size_t size() const;

 private:
  // Session sandboxes are started by one long-lived thread: a sandbox's
  // parent-death signal fires when the thread that cloned it ends, and a
  // session outlives the job thread of its first execution.
  common::StatusOr<WarmSandbox> Spawn(runtimes::Language language);
  void SpawnLoop(std::stop_token stop);

  // Carries out the deferred stops; a stopped session's memory counts
  // against the idle budget as a released one's does.
  void StopLoop(std::stop_token stop);

  WarmPool* pool_;
  IdleSessionBudget budget_;
  std::chrono::milliseconds stop_after_;
  // Moves the least recently used idle sessions over the budget to `doomed`;
  // mu_ held.
  void ReclaimLocked(const std::string& tenant,
                     std::vector<std::shared_ptr<SessionSandbox>>* doomed);
  // The end of a hold (an execution's, or the stopper's), mu_ held: `s` is
  // no longer busy and holds `bytes`; it leaves the table (to `doomed`) when
  // `destroy` or a Close came meanwhile, else the idle budget is enforced
  // for its tenant (to `reclaimed`).
  void UnholdLocked(const std::shared_ptr<SessionSandbox>& s, uint64_t bytes, bool destroy,
                    std::shared_ptr<SessionSandbox>* doomed,
                    std::vector<std::shared_ptr<SessionSandbox>>* reclaimed);
  static void LogReclaimed(const std::vector<std::shared_ptr<SessionSandbox>>& reclaimed);
  struct SpawnRequest {
    runtimes::Language language;
    std::promise<common::StatusOr<WarmSandbox>> done;
  };
  std::mutex spawn_mu_;
  std::condition_variable_any spawn_cv_;
  std::deque<SpawnRequest> spawn_queue_;
  // Longer than a freeze may take (cgroups.hpp WaitUntil: 2 s).
  static constexpr std::chrono::milliseconds kBusyWait{3000};

  mutable std::mutex mu_;
  std::condition_variable released_;  // a Release(); with mu_
  std::map<std::string, std::shared_ptr<SessionSandbox>> sessions_;
  std::map<std::string, bool> closing_;  // Close() while busy
  // Epochs this worker has run, per session id (bounded): tells a lost state
  // from a first execution.
  std::map<std::string, uint64_t> ran_;
  // Sessions left running, by when they were due to stop when queued.
  std::multimap<std::chrono::steady_clock::time_point, std::weak_ptr<SessionSandbox>>
      stops_;                            // with mu_
  std::condition_variable_any stop_cv_;  // a stop queued; with mu_
  std::jthread stopper_;                 // runs StopLoop while stop_after_ > 0
  std::jthread spawner_;                 // last: stopped and joined first
};

}  // namespace kiln::worker
