#include "worker/executor/session_table.hpp"

#include <poll.h>

#include <algorithm>
#include <vector>

#include "common/log/logging.hpp"
#include "common/protocol/session_key.hpp"
#include "common/thread_name.hpp"
#include "worker/executor/session_runner.hpp"

namespace kiln::worker {

using common::protocol::SessionIdOf;
namespace {

const common::SubsystemLog kLog("sessions");

// Bounds the memory of epochs run (one entry per session id).
constexpr size_t kMaxRemembered = 100000;

bool Exited(const WarmSandbox& sb) {
  pollfd p{sb.process->exit_fd(), POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

}  // namespace

SessionTable::SessionTable(WarmPool* pool, IdleSessionBudget budget,
                           std::chrono::milliseconds stop_after)
    : pool_(pool),
      budget_(budget),
      stop_after_(std::max(stop_after, std::chrono::milliseconds(0))),
      spawner_([this](std::stop_token st) {
        common::NameThisThread("kiln-sess-spawn");
        SpawnLoop(st);
      }) {
  if (stop_after_.count() > 0) {
    stopper_ = std::jthread([this](std::stop_token st) {
      common::NameThisThread("kiln-sess-stop");
      StopLoop(st);
    });
  }
}

common::StatusOr<WarmSandbox> SessionTable::Spawn(runtimes::Language language) {
  std::future<common::StatusOr<WarmSandbox>> done;
  {
    std::lock_guard lock(spawn_mu_);
    spawn_queue_.push_back({language, {}});
    done = spawn_queue_.back().done.get_future();
  }
  spawn_cv_.notify_one();
  return done.get();
}

void SessionTable::SpawnLoop(std::stop_token stop) {
  while (true) {
    SpawnRequest req;
    {
      std::unique_lock lock(spawn_mu_);
      spawn_cv_.wait(lock, stop, [&] { return !spawn_queue_.empty(); });
      if (spawn_queue_.empty()) return;  // stopping
      req = std::move(spawn_queue_.front());
      spawn_queue_.pop_front();
    }
    req.done.set_value(pool_->SpawnSession(req.language));
  }
}

SessionTable::~SessionTable() {
  if (stopper_.joinable()) {
    stopper_.request_stop();
    stopper_.join();
  }
  std::lock_guard lock(mu_);
  sessions_.clear();  // each SandboxProcess kills and reaps its driver
}

common::StatusOr<SessionTable::Lease> SessionTable::Acquire(const common::protocol::Execute& job) {
  ASSIGN_OR_RETURN(runtimes::Language language, runtimes::ParseLanguage(job.language));
  std::shared_ptr<SessionSandbox> old;  // destroyed outside the lock
  Lease lease;
  {
    std::unique_lock lock(mu_);
    // The previous execution's Result has left, but it may still be freezing
    // the session (Executor::RunSession): the broker sent this one on that
    // Result. Wait for the release; longer is a real duplicate.
    released_.wait_for(lock, kBusyWait, [&] {
      auto it = sessions_.find(job.session_id);
      return it == sessions_.end() || !it->second->busy;
    });
    auto it = sessions_.find(job.session_id);
    if (it != sessions_.end()) {
      auto& s = it->second;
      if (s->busy) {
        return common::Unavailable("session " + job.session_id +
                                   " is already running an execution");
      }
      if (s->epoch == job.session_epoch && s->language == language && s->tenant == job.tenant &&
          !Exited(s->sandbox)) {
        s->busy = true;
        s->ttl_ms = job.session_ttl_ms;
        lease.session = s;
        return lease;
      }
      // Another incarnation, or its driver died: start afresh.
      old = std::move(s);
      sessions_.erase(it);
    }
    auto ran = ran_.find(job.session_id);
    lease.state_lost = ran != ran_.end() && ran->second == job.session_epoch;
  }
  old.reset();
  ASSIGN_OR_RETURN(WarmSandbox sb, Spawn(language));
  auto s = std::make_shared<SessionSandbox>();
  s->id = job.session_id;
  s->tenant = job.tenant;
  s->language = language;
  s->control = runtimes::ControlStream(language);
  s->epoch = job.session_epoch;
  s->sandbox = std::move(sb);
  s->ttl_ms = job.session_ttl_ms;
  s->last_used = std::chrono::steady_clock::now();
  s->busy = true;
  std::lock_guard lock(mu_);
  if (sessions_.count(job.session_id) != 0) {
    return common::Unavailable("session " + job.session_id + " is already running an execution");
  }
  if (ran_.size() >= kMaxRemembered) ran_.erase(ran_.begin());
  ran_[job.session_id] = job.session_epoch;
  sessions_[job.session_id] = s;
  closing_.erase(job.session_id);
  lease.session = std::move(s);
  return lease;
}

size_t SessionTable::Release(const std::shared_ptr<SessionSandbox>& session, bool destroy) {
  std::shared_ptr<SessionSandbox> doomed;
  std::vector<std::shared_ptr<SessionSandbox>> reclaimed;
  // Read before taking the lock (a file read).
  const uint64_t bytes = destroy ? 0 : session->sandbox.process->MemoryBytes().value_or(0);
  {
    std::lock_guard lock(mu_);
    session->last_used = std::chrono::steady_clock::now();
    ++session->executions;
    UnholdLocked(session, bytes, destroy, &doomed, &reclaimed);
  }
  released_.notify_all();
  LogReclaimed(reclaimed);
  // Leaving, the SandboxProcess destructors kill and reap the drivers of
  // `doomed` and `reclaimed` (not under the lock).
  return reclaimed.size();
}

void SessionTable::UnholdLocked(const std::shared_ptr<SessionSandbox>& s, uint64_t bytes,
                                bool destroy, std::shared_ptr<SessionSandbox>* doomed,
                                std::vector<std::shared_ptr<SessionSandbox>>* reclaimed) {
  s->busy = false;
  s->idle_bytes = bytes;
  auto it = sessions_.find(s->id);
  const bool closing = closing_.erase(s->id) > 0;
  if (it == sessions_.end() || it->second != s) return;  // no longer the table's
  if (destroy || closing) {
    *doomed = std::move(it->second);
    sessions_.erase(it);
  } else {
    ReclaimLocked(s->tenant, reclaimed);
  }
}

void SessionTable::LogReclaimed(const std::vector<std::shared_ptr<SessionSandbox>>& reclaimed) {
  for (const auto& s : reclaimed) {
    kLog.Info({.session = SessionIdOf(s->id), .tenant = s->tenant},
              "idle session reclaimed: idle sessions over their memory budget ({} MiB held)",
              s->idle_bytes >> 20);
  }
}

size_t SessionTable::Rest(const std::shared_ptr<SessionSandbox>& session) {
  // An execution that failed before it resumed the session: still stopped.
  if (session->stopped) return Release(session, false);
  if (stop_after_.count() == 0) {
    const bool stopped = FreezeBetweenExecutions(*session);
    if (!stopped) {
      kLog.Info({.session = SessionIdOf(session->id), .tenant = session->tenant},
                "session sandbox destroyed after the execution (it could not be stopped)");
    }
    return Release(session, !stopped);
  }
  // Normally the execution's own end; else (it failed early) from now.
  if (!session->cpu_at_end_ms) session->cpu_at_end_ms = session->sandbox.process->CpuMs();
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    session->awake = true;
    session->stop_due = std::chrono::steady_clock::now() + stop_after_;
    // One entry per session: the stopper moves it on when the session ran
    // again since it was queued.
    if (!session->stop_queued) {
      session->stop_queued = true;
      wake = stops_.empty();
      stops_.emplace(session->stop_due, session);
    }
  }
  if (wake) stop_cv_.notify_one();
  return Release(session, false);
}

void SessionTable::StopLoop(std::stop_token stop) {
  // Stops due within half the delay of each other share one wake-up: a
  // session is stopped between one and one and a half delays after its
  // last execution.
  const auto slack = stop_after_ / 2;
  std::unique_lock lock(mu_);
  while (!stop.stop_requested()) {
    if (stops_.empty()) {
      stop_cv_.wait(lock, stop, [&] { return !stops_.empty(); });
      continue;
    }
    if (const auto wake_at = stops_.begin()->first + slack;
        std::chrono::steady_clock::now() < wake_at) {
      stop_cv_.wait_until(lock, stop, wake_at, [] { return false; });
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    std::vector<std::shared_ptr<SessionSandbox>> due;
    // Those left alone; one that was the last of its owners dies off the lock.
    std::vector<std::shared_ptr<SessionSandbox>> skipped;
    while (!stops_.empty() && stops_.begin()->first <= now) {
      std::shared_ptr<SessionSandbox> s = stops_.begin()->second.lock();
      stops_.erase(stops_.begin());
      if (!s) continue;
      s->stop_queued = false;
      auto it = sessions_.find(s->id);
      // Running an execution (whose end queues it again), already stopped,
      // or no longer the table's: nothing to do.
      if (it == sessions_.end() || it->second != s || s->busy || !s->awake) {
        skipped.push_back(std::move(s));
      } else if (s->stop_due > now) {  // it ran again since: its stop moves on
        s->stop_queued = true;
        stops_.emplace(s->stop_due, s);
      } else {
        s->busy = true;  // an Acquire meanwhile waits for the stop (kBusyWait)
        due.push_back(std::move(s));
      }
    }
    lock.unlock();
    skipped.clear();
    for (const auto& s : due) {
      const bool stopped = FreezeBetweenExecutions(*s);
      const uint64_t bytes = stopped ? s->sandbox.process->MemoryBytes().value_or(0) : 0;
      std::shared_ptr<SessionSandbox> doomed;
      std::vector<std::shared_ptr<SessionSandbox>> reclaimed;
      {
        std::lock_guard relock(mu_);
        s->awake = false;
        UnholdLocked(s, bytes, !stopped, &doomed, &reclaimed);
      }
      released_.notify_all();
      if (!stopped) {
        kLog.Info({.session = SessionIdOf(s->id), .tenant = s->tenant},
                  "idle session sandbox destroyed: it could not be stopped");
      }
      LogReclaimed(reclaimed);
    }
    due.clear();  // sandboxes that were the last of theirs die here, off the lock
    lock.lock();
  }
}

void SessionTable::ReclaimLocked(const std::string& tenant,
                                 std::vector<std::shared_ptr<SessionSandbox>>* doomed) {
  auto over = [&](bool tenant_only) {
    uint64_t budget = tenant_only ? budget_.tenant_bytes : budget_.worker_bytes;
    if (budget == 0) return false;
    uint64_t held = 0;
    for (const auto& [id, s] : sessions_) {
      if (!s->busy && (!tenant_only || s->tenant == tenant)) held += s->idle_bytes;
    }
    return held > budget;
  };
  for (bool tenant_only : {true, false}) {
    while (over(tenant_only)) {
      auto lru = sessions_.end();
      for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
        const auto& s = it->second;
        if (s->busy || (tenant_only && s->tenant != tenant)) continue;
        if (lru == sessions_.end() || s->last_used < lru->second->last_used) lru = it;
      }
      if (lru == sessions_.end()) break;
      doomed->push_back(std::move(lru->second));
      sessions_.erase(lru);
    }
  }
}

uint64_t SessionTable::IdleBytes() const {
  std::lock_guard lock(mu_);
  uint64_t held = 0;
  for (const auto& [id, s] : sessions_) {
    if (!s->busy) held += s->idle_bytes;
  }
  return held;
}

void SessionTable::Close(const std::string& id) {
  std::shared_ptr<SessionSandbox> doomed;
  {
    std::lock_guard lock(mu_);
    ran_.erase(id);
    auto it = sessions_.find(id);
    if (it == sessions_.end()) return;
    if (it->second->busy) {
      closing_[id] = true;
      return;
    }
    doomed = std::move(it->second);
    sessions_.erase(it);
  }
  kLog.Info({.session = SessionIdOf(id), .tenant = doomed->tenant}, "session closed");
}

size_t SessionTable::ExpireIdle(std::chrono::steady_clock::time_point now) {
  std::vector<std::shared_ptr<SessionSandbox>> doomed;
  {
    std::lock_guard lock(mu_);
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      const auto& s = it->second;
      auto ttl = std::chrono::milliseconds(s->ttl_ms) + kTtlMargin;
      if (!s->busy && s->ttl_ms > 0 && now - s->last_used > ttl) {
        kLog.Info({.session = SessionIdOf(s->id), .tenant = s->tenant},
                  "session idle for its TTL: destroying its sandbox");
        doomed.push_back(std::move(it->second));
        it = sessions_.erase(it);
      } else {
        ++it;
      }
    }
  }
  return doomed.size();
}

size_t SessionTable::size() const {
  std::lock_guard lock(mu_);
  return sessions_.size();
}

}  // namespace kiln::worker
