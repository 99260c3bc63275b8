// The Dispatcher's recovery work (see dispatcher.hpp): once per heartbeat
// interval (Tick) it retries what Redis refused, renews this broker's
// leases, takes over the jobs of brokers that stopped, adopts strays, ends
// overdue jobs and expired approvals; and when a worker is lost, its jobs end
// WORKER_LOST and its sessions are lost. Loop thread only, like the rest.
#include <limits>
#include <set>

#include "broker/metrics/broker_metrics.hpp"
#include "broker/scheduler/dispatcher.hpp"
#include "broker/scheduler/scheduler_log.hpp"
#include "common/clock.hpp"

namespace kiln::broker {
namespace {

namespace protocol = common::protocol;
using namespace scheduler_log;
using common::Code;

// A job whose worker is alive but sends no result this long after the job's
// timeout is ended by the broker (exactly one terminal state, always).
constexpr int64_t kResultGraceMs = 30'000;
// A job running on this broker's name that it does not hold is adopted once
// it started this long ago (a job just started waits in the inbox a moment).
constexpr int64_t kStrayAfterMs = 10'000;
// Submits whose answer was lost are looked up for this long.
constexpr int64_t kUnconfirmedForMs = 60'000;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

void Dispatcher::ResolveUnconfirmed() {
  std::deque<std::pair<std::string, int64_t>> todo;
  {
    std::lock_guard lock(mu_);
    todo.swap(unconfirmed_);
  }
  const int64_t now = common::NowMs();
  while (!todo.empty()) {
    auto [id, decided_ms] = todo.front();
    auto record = stores_.jobs->Load(id);
    if (!record.ok() && record.status().code() != Code::kNotFound) {
      if (options_.metrics) options_.metrics->RedisError();
      break;  // Redis still away: the rest wait too
    }
    todo.pop_front();
    // Not stored (the script never ran, or ran too late), queued (any pump
    // starts it), ended, or held here: nothing to do.
    if (!record.ok() || record->status != JobStatus::kRunning || in_flight_.count(id)) continue;
    auto spec = stores_.jobs->LoadSpec(id);
    if (!spec.ok()) continue;  // a stray for the tick to adopt
    kJobsLog.Info({.job = id, .tenant = spec->tenant, .worker = record->worker},
                  "a submit whose answer was lost started the job: sending it");
    std::optional<SessionEpoch> epoch;
    if (record->session_epoch)
      epoch = SessionEpoch{record->session_incarnation, *record->session_epoch};
    SendStart({std::move(*spec), record->worker, epoch, decided_ms});
  }
  // Given up after a while (the tick adopts strays); kept in order otherwise.
  std::lock_guard lock(mu_);
  for (auto it = todo.rbegin(); it != todo.rend(); ++it) {
    if (now - it->second < kUnconfirmedForMs) unconfirmed_.push_front(std::move(*it));
  }
}

void Dispatcher::ExpireApprovals(const std::vector<std::string>& ids) {
  for (const auto& id : ids) {
    auto record = stores_.jobs->Load(id);
    if (!record.ok()) continue;
    auto t = JobLifecycle::Apply(*record,
                                 {.event = JobEvent::kApprovalExpired, .now_ms = common::NowMs()});
    if (!t.ok() || !t->Has(JobAction::kStoreEnd)) continue;
    auto out = EndJob(*t);
    if (out.ok() && out->kind == FinishOutcome::Kind::kStored && options_.metrics) {
      options_.metrics->Approval(record->tenant, "expired");
    }
  }
}

void Dispatcher::Tick() {
  // Terminal records Redis refused earlier.
  finisher_.RetryUnsaved();
  ResolveUnconfirmed();
  while (!sessions_to_lose_.empty()) {
    const std::string worker = *sessions_to_lose_.begin();
    if (!LoseSessions(worker)) break;
    sessions_to_lose_.erase(worker);
    table_.SetSessionsFrom(worker, common::NowMs());
  }
  PublishWorkers();
  if (auto st = stores_.schedule->PublishTenants(options_.tenant_shares); !st.ok()) {
    if (options_.metrics) options_.metrics->RedisError();
  }
  RenewLeases();
  // Take over only once workers have had a liveness window to register
  // here: adopted jobs need their workers known.
  if (Clock::now() - started_at_ > options_.heartbeat_interval * options_.liveness) {
    // Our own jobs of a previous run are adopted once, when Redis answers.
    if (TakeOver(!took_over_self_)) took_over_self_ = true;
  }
  FailOverdue();
}

void Dispatcher::RenewLeases() {
  std::vector<InFlightRef> refs;
  refs.reserve(in_flight_.size());
  for (const auto& [id, f] : in_flight_) refs.push_back({id, f.spec.tenant, f.worker});
  const int64_t dead_after =
      static_cast<int64_t>(options_.heartbeat_interval.count()) * options_.liveness;
  auto t0 = Clock::now();
  std::vector<std::string> workers;
  for (const auto& [id, w] : table_.workers()) workers.push_back(id);
  const int64_t now_ms = common::NowMs();
  auto tick = stores_.schedule->Tick(refs, now_ms, dead_after, workers, now_ms - kStrayAfterMs);
  if (options_.metrics) options_.metrics->RedisCall("tick", SecondsSince(t0));
  if (!tick.ok()) {
    if (options_.metrics) options_.metrics->RedisError();
    static common::LogLimiter limit(kHostileLines, kLogWindow);
    kLog.Warn(limit, {}, "could not renew leases: {}", tick.status().ToString());
    return;
  }
  renewals_.Answered(common::NowMs());
  for (const auto& id : tick->not_owned) {
    // Ended elsewhere (its result reached another broker) or taken over.
    auto it = in_flight_.find(id);
    if (it == in_flight_.end()) continue;
    table_.Release(it->second.worker, id);
    in_flight_.erase(it);
  }
  AdoptStrays(tick->strays);
  size_t queued = 0;
  for (const auto& t : tick->tenants) queued += t.queued;
  {
    std::lock_guard lock(mu_);
    queued_total_ = queued;
  }
  if (queued > 0) pump_due_ = true;
  if (options_.metrics) options_.metrics->SetSchedule(*tick);
  ExpireApprovals(tick->approvals_expired);
  for (const auto& [worker, sid] : tick->sessions_expired) {
    kLog.Info({.session = sid, .worker = worker}, "session expired: closing it");
    Send(worker, protocol::CloseSession{sid});
  }
}

bool Dispatcher::TakeOver(bool include_self) {
  if (!renewals_.MayClaim(common::NowMs())) return false;
  const int64_t dead_after =
      static_cast<int64_t>(options_.heartbeat_interval.count()) * options_.liveness;
  auto claimed = stores_.schedule->Claim(common::NowMs() - dead_after, include_self);
  if (!claimed.ok()) {
    if (options_.metrics) options_.metrics->RedisError();
    return false;
  }
  if (claimed->empty()) return true;
  for (const auto& [id, worker] : *claimed) {
    if (Adopt(id, "took over the job from a broker that stopped") && options_.metrics) {
      options_.metrics->TakenOver();
    }
  }
  // Renew the adopted leases now, before they run out.
  RenewLeases();
  return true;
}

bool Dispatcher::Adopt(const std::string& id, const char* why) {
  if (in_flight_.count(id)) return false;
  {
    // Started by this process a moment ago, not sent yet (on start-up our
    // own in-flight hash is claimed, and it holds those too).
    std::lock_guard lock(mu_);
    for (const auto& req : inbox_) {
      if (req.spec.id == id) return false;
    }
  }
  auto spec = stores_.jobs->LoadSpec(id);
  auto record = stores_.jobs->Load(id);
  if (!spec.ok() || !record.ok() || record->status != JobStatus::kRunning) return false;
  const std::string worker = record->worker;
  kJobsLog.Warn({.job = id, .tenant = record->tenant, .worker = worker}, "{}", why);
  in_flight_.emplace(id, InFlight{std::move(*spec), std::move(*record), worker});
  if (!table_.Known(worker)) {
    LoseWorker(worker, {id}, "its worker is not connected");
  } else {
    // Its result ends it; if the worker never had it, the overdue check does.
    table_.Assign(worker, id, common::NowMs());
  }
  return true;
}

void Dispatcher::AdoptStrays(const std::vector<std::string>& strays) {
  if (strays.empty()) return;
  const std::set<std::string> ending = finisher_.UnsavedIds();  // ended here: not strays
  for (const auto& id : strays) {
    if (ending.count(id) == 0) {
      Adopt(id, "adopted a job running on this broker's name that it did not hold");
    }
  }
}

void Dispatcher::FailOverdue() {
  const int64_t now = common::NowMs();
  std::vector<std::string> overdue;
  for (const auto& [id, f] : in_flight_) {
    // A job with packages may spend up to kMaxPackageInstallMs installing them first.
    const int64_t install =
        f.spec.packages.empty() ? 0 : static_cast<int64_t>(protocol::kMaxPackageInstallMs);
    const int64_t limit = static_cast<int64_t>(f.spec.limits.timeout_ms) + install + kResultGraceMs;
    if (now - f.record.started_ms > limit) overdue.push_back(id);
  }
  for (const auto& id : overdue) {
    auto it = in_flight_.find(id);
    InFlight f = std::move(it->second);
    in_flight_.erase(it);
    table_.Release(f.worker, id);
    Send(f.worker, protocol::Cancel{id});
    kJobsLog.Error({.job = id, .tenant = f.record.tenant, .worker = f.record.worker},
                   "no result {} ms after the timeout: ending the job", kResultGraceMs);
    auto t = JobLifecycle::Apply(std::move(f.record), {.event = JobEvent::kOverdue, .now_ms = now});
    if (t.ok()) finisher_.Finish(std::move(t->record));
  }
}

size_t Dispatcher::LoseJobs(const std::string& worker, const std::vector<std::string>& job_ids,
                            const std::string& why) {
  size_t lost = 0;
  for (const auto& id : job_ids) {
    auto it = in_flight_.find(id);
    if (it == in_flight_.end()) continue;
    auto t = JobLifecycle::Apply(
        std::move(it->second.record),
        {.event = JobEvent::kWorkerLost, .now_ms = common::NowMs(), .detail = why});
    in_flight_.erase(it);
    if (!t.ok()) continue;
    const JobRecord& r = t->record;
    kJobsLog.Warn({.job = id, .session = r.session_id, .tenant = r.tenant, .worker = worker},
                  "job lost with its worker");
    finisher_.Finish(std::move(t->record));
    ++lost;
  }
  if (options_.metrics && lost > 0) options_.metrics->JobsWorkerLost(lost);
  return lost;
}

void Dispatcher::LoseWorker(const std::string& worker, const std::vector<std::string>& job_ids,
                            const std::string& why, bool expired) {
  const size_t lost = LoseJobs(worker, job_ids, why);
  if (options_.metrics && (expired || lost > 0)) {
    options_.metrics->WorkerLost();
  }
  if (!LoseSessions(worker)) {
    // Retried every tick; meanwhile no session execution goes to it.
    sessions_to_lose_.insert(worker);
    table_.SetSessionsFrom(worker, std::numeric_limits<int64_t>::max());
  }
}

bool Dispatcher::LoseSessions(const std::string& worker) {
  // Its sessions' state is gone; their queued executions can never run.
  auto queued = stores_.sessions->LoseWorker(worker);
  if (!queued.ok()) {
    if (options_.metrics) options_.metrics->RedisError();
    static common::LogLimiter limit(kHostileLines, kLogWindow);
    kLog.Error(limit, {.worker = worker}, "could not mark the worker's sessions lost: {}",
               queued.status().ToString());
    return false;
  }
  for (const auto& id : *queued) {
    auto spec = stores_.jobs->LoadSpec(id);
    if (spec.ok()) EndLostExecution(*spec);
  }
  return true;
}

void Dispatcher::EndLostExecution(const JobSpec& spec) {
  auto t = JobLifecycle::Apply(JobRecord::Queued(spec),
                               {.event = JobEvent::kSessionLost,
                                .now_ms = common::NowMs(),
                                .detail = "the worker holding session " + spec.session_id +
                                          " was lost before this execution started"});
  // If Redis refuses, the next pump names the execution again.
  if (t.ok()) (void)EndJob(*t);
}

}  // namespace kiln::broker
