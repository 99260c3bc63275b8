#include "broker/scheduler/dispatcher.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <thread>
#include <type_traits>

#include "broker/job/isolation.hpp"
#include "broker/job/lifecycle.hpp"
#include "broker/metrics/broker_metrics.hpp"
#include "broker/scheduler/scheduler_log.hpp"
#include "common/clock.hpp"
#include "common/json/bounded_json.hpp"
#include "common/log/logging.hpp"
#include "common/protocol/codec.hpp"
#include "common/thread_name.hpp"

namespace kiln::broker {
namespace {

namespace protocol = common::protocol;
using namespace scheduler_log;
using common::Code;

constexpr int kMaxMessagesPerPoll = 256;
// Submits whose answer was lost are looked up, at most this many.
constexpr size_t kMaxUnconfirmed = 10'000;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

common::StatusOr<std::unique_ptr<Dispatcher>> Dispatcher::Create(DispatcherOptions options,
                                                                 zmq::context_t* ctx,
                                                                 DispatcherStores stores,
                                                                 JobWaiters* waiters) {
  common::UniqueFd wake(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake.valid()) return common::ErrnoStatus("eventfd", errno);
  GatewayOptions g;
  g.broker_id = options.broker_id;
  g.endpoint = options.endpoint;
  g.heartbeat_interval = options.heartbeat_interval;
  g.liveness = options.liveness;
  g.metrics = options.metrics;
  g.curve_secret_key = options.curve_secret_key;
  g.keyring = options.keyring;
  g.on_tool_call = options.on_tool_call;
  auto d = std::unique_ptr<Dispatcher>(
      new Dispatcher(std::move(options), std::move(wake), stores, waiters));
  Dispatcher* self = d.get();
  ASSIGN_OR_RETURN(d->gateway_,
                   WorkerGateway::Create(std::move(g), ctx, &d->output_, [self] { self->Wake(); }));
  return d;
}

Dispatcher::Dispatcher(DispatcherOptions options, common::UniqueFd wake, DispatcherStores stores,
                       JobWaiters* waiters)
    : options_(std::move(options)),
      wake_(std::move(wake)),
      stores_(stores),
      waiters_(waiters),
      output_(options_.output_buffer_job_bytes, options_.output_buffer_bytes),
      finisher_(stores.jobs, stores.schedule, waiters, options_.metrics, options_.audit,
                options_.max_unsaved_bytes,
                {.candidates = [this] { return Candidates(); },
                 .start = [this](const std::vector<StartedJob>& s) { StartAll(s); },
                 .ack = [this](const std::string& worker,
                               const std::string& id) { acks_.Add(worker, id, Clock::now()); }}),
      renewals_(static_cast<int64_t>(options_.heartbeat_interval.count()) * options_.liveness) {}

Dispatcher::~Dispatcher() = default;

void Dispatcher::Start(JobSpec spec, std::string worker, std::optional<SessionEpoch> session_epoch,
                       int64_t decided_ms) {
  {
    std::lock_guard lock(mu_);
    inbox_.push_back({std::move(spec), std::move(worker), session_epoch, decided_ms});
  }
  Wake();
}

void Dispatcher::StartAll(const std::vector<StartedJob>& started) {
  if (started.empty()) return;
  // Parsed before the lock: the HTTP threads' Start waits on it.
  std::vector<StartRequest> requests;
  requests.reserve(started.size());
  for (const auto& s : started) {
    if (auto spec = queued_specs_.Take(s.job_id)) {
      requests.push_back({std::move(*spec), s.worker, s.session_epoch, s.decided_ms});
      continue;
    }
    auto j = common::ParseJson(s.spec_json);
    auto spec = j.ok() ? JobSpec::FromJson(*j) : common::StatusOr<JobSpec>(j.status());
    if (!spec.ok()) {
      // Cannot happen unless Redis holds garbage; the job ends overdue.
      kLog.Error({.job = s.job_id}, "damaged spec in Redis: {}", spec.status().ToString());
      continue;
    }
    requests.push_back({std::move(*spec), s.worker, s.session_epoch, s.decided_ms});
  }
  {
    std::lock_guard lock(mu_);
    for (auto& r : requests) inbox_.push_back(std::move(r));
  }
  Wake();
}

void Dispatcher::Unconfirmed(std::string job_id, int64_t decided_ms) {
  std::lock_guard lock(mu_);
  if (unconfirmed_.size() >= kMaxUnconfirmed) unconfirmed_.pop_front();
  unconfirmed_.emplace_back(std::move(job_id), decided_ms);
}

void Dispatcher::Queued(JobSpec spec) {
  queued_specs_.Put(std::move(spec));
  Poke();
}

void Dispatcher::Poke() {
  {
    std::lock_guard lock(mu_);
    poked_ = true;
  }
  Wake();
}

void Dispatcher::Cancel(const std::string& job_id) {
  {
    std::lock_guard lock(mu_);
    cancels_.push_back(job_id);
  }
  Wake();
}

void Dispatcher::CloseSession(const std::string& worker, const std::string& session_id) {
  {
    std::lock_guard lock(mu_);
    closes_.emplace_back(worker, session_id);
  }
  Wake();
}

void Dispatcher::Wake() {
  uint64_t one = 1;
  ssize_t n = ::write(wake_.get(), &one, sizeof(one));
  (void)n;  // EAGAIN means the counter is already non-zero: the loop wakes anyway
}

size_t Dispatcher::QueueDepth() const {
  std::lock_guard lock(mu_);
  return queued_total_;
}

std::vector<WorkerView> Dispatcher::Workers() const {
  std::lock_guard lock(mu_);
  return worker_views_;
}

std::vector<WorkerSlots> Dispatcher::Candidates() const {
  std::lock_guard lock(mu_);
  return candidates_;
}

std::vector<std::string> Dispatcher::Runtimes() const {
  std::set<std::string> all;
  std::lock_guard lock(mu_);
  for (const auto& w : worker_views_) all.insert(w.runtimes.begin(), w.runtimes.end());
  return {all.begin(), all.end()};
}

std::vector<std::string> Dispatcher::IsolationLevels() const {
  std::set<std::string> all;
  std::lock_guard lock(mu_);
  for (const auto& w : worker_views_) all.insert(w.isolation);
  return {all.begin(), all.end()};
}

std::vector<std::string> Dispatcher::RuntimesAt(std::string_view level) const {
  level = NormalizeIsolation(level);
  std::set<std::string> all;
  std::lock_guard lock(mu_);
  for (const auto& w : worker_views_) {
    if (w.isolation == level) all.insert(w.runtimes.begin(), w.runtimes.end());
  }
  return {all.begin(), all.end()};
}

common::StatusOr<FinishOutcome> Dispatcher::EndJob(const JobTransition& t) {
  return finisher_.EndJob(t);
}

common::StatusOr<ApproveOutcome> Dispatcher::Approve(const std::string& job_id, bool trust_session,
                                                     const std::string& approver) {
  auto out =
      stores_.schedule->Approve(job_id, trust_session, approver, Candidates(), common::NowMs());
  if (!out.ok()) {
    if (options_.metrics) options_.metrics->RedisError();
    return out.status();
  }
  if (out->started) {
    StartAll({*out->started});
  } else if (out->kind == ApproveOutcome::Kind::kQueued) {
    Poke();
  }
  return out;
}

void Dispatcher::Run(std::stop_token stop) {
  started_at_ = Clock::now();
  next_tick_ = started_at_;
  next_pump_ = started_at_;
  std::jthread io([this](std::stop_token st) {
    common::NameThisThread("kiln-gateway");
    gateway_->Run(st);
  });
  while (!stop.stop_requested()) {
    auto now = Clock::now();
    if (now >= next_tick_) {
      Tick();
      next_tick_ = now + options_.heartbeat_interval;
    }
    if (pump_due_ && now >= next_pump_) {
      Pump();
      next_pump_ = now + options_.pump_interval;
    }
    finisher_.Flush();  // the ends the tick decided (lost workers, overdue jobs)
    for (auto& [worker, id] : acks_.TakeDue(Clock::now())) {
      Send(worker, protocol::ResultAck{std::move(id)});
    }
    auto until = std::min(next_tick_, pump_due_ ? next_pump_ : next_tick_);
    if (auto due = acks_.NextDue()) until = std::min(until, *due);
    // Wake at least every 100 ms to notice a stop request; at once while
    // output waits to be stored.
    auto wait = std::min<Clock::duration>(until - Clock::now(), std::chrono::milliseconds(100));
    if (!output_.empty()) wait = Clock::duration::zero();
    pollfd p{wake_.get(), POLLIN, 0};
    int n = ::poll(&p, 1,
                   // Rounded up: a wait cut short would spin until its deadline.
                   static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(
                                        std::max<Clock::duration>(wait, Clock::duration::zero()))
                                        .count()));
    if (n > 0) {
      uint64_t count = 0;
      ssize_t r = ::read(wake_.get(), &count, sizeof(count));
      (void)r;
    }
    DrainInbox();
    HandleEvents();
    // The rest of the output, a budget at a time: a flood's chunks share the
    // loop with everything else.
    if (!output_.empty()) StoreOutput(output_.TakeSome(options_.output_flush_bytes));
    // Every end this turn decided, in one round trip (two with output tails).
    finisher_.Flush();
    if (options_.metrics) {
      options_.metrics->SetOutputPending(output_.bytes());
      options_.metrics->SetResultsUnsaved(finisher_.unsaved());
    }
  }
  finisher_.Flush();
  for (auto& [worker, id] : acks_.TakeDue(Clock::time_point::max())) {
    Send(worker, protocol::ResultAck{std::move(id)});
  }
  // Workers are told we are going (by the gateway, as it stops), so they
  // fail over at once instead of after their liveness timeout. Our jobs in
  // flight stay in Redis for another broker (or this one, restarted) to take
  // over.
  io.request_stop();
}

void Dispatcher::DrainInbox() {
  std::deque<StartRequest> batch;
  std::deque<std::string> cancels;
  std::deque<std::pair<std::string, std::string>> closes;
  bool poked = false;
  {
    std::lock_guard lock(mu_);
    batch.swap(inbox_);
    cancels.swap(cancels_);
    closes.swap(closes_);
    std::swap(poked, poked_);
  }
  for (auto& req : batch) SendStart(std::move(req));
  for (const auto& id : cancels) CancelNow(id);
  for (const auto& [worker, sid] : closes) {
    if (table_.Known(worker)) Send(worker, protocol::CloseSession{sid});
  }
  if (poked) pump_due_ = true;
}

void Dispatcher::SendStart(StartRequest req) {
  if (req.worker.empty()) return EndLostExecution(req.spec);
  JobSpec& spec = req.spec;
  protocol::Execute execute = spec.ToExecute();
  // Output is streamed for every job: a subscriber may arrive at any time.
  execute.stream_output = true;
  if (auto s = options_.tenant_secrets.find(spec.tenant); s != options_.tenant_secrets.end()) {
    execute.secrets = s->second;
  }
  if (!spec.session_id.empty()) {
    execute.session_epoch = req.session_epoch ? req.session_epoch->incarnation : 0;
    execute.session_ttl_ms = stores_.schedule->settings().session_ttl_ms;
  }
  const JobRecord queued = JobRecord::Queued(spec);
  auto started = JobLifecycle::Apply(queued, {.event = JobEvent::kStart,
                                              .now_ms = common::NowMs(),
                                              .worker = req.worker,
                                              .session_epoch = req.session_epoch});
  if (!started.ok()) {
    kJobsLog.Error({.job = spec.id}, "cannot start: {}", started.status().ToString());
    return;
  }
  JobRecord record = std::move(started->record);
  const std::string id = spec.id;
  if (!table_.Known(req.worker)) {
    // The worker left between the script and now: the job goes back to its
    // place in the queue (it never ran).
    kJobsLog.Info({.job = id, .worker = req.worker},
                  "worker gone before the job reached it: requeueing");
    Requeue(id);
    return;
  }
  if (!spec.session_id.empty() && !table_.SessionsFrom(req.worker, req.decided_ms)) {
    // The worker registered anew (restarted, or back after being declared
    // dead) after the scheduler chose it: the session's state is not there,
    // and a fresh interpreter would run the code without it.
    kJobsLog.Warn(
        {.job = id, .session = spec.session_id, .tenant = spec.tenant, .worker = req.worker},
        "the session's worker registered anew before the execution reached it");
    auto lost =
        JobLifecycle::Apply(queued, {.event = JobEvent::kSessionLost,
                                     .now_ms = common::NowMs(),
                                     .detail = "the worker holding session " + spec.session_id +
                                               " restarted before this execution reached it",
                                     .worker = req.worker,
                                     .session_epoch = req.session_epoch});
    if (lost.ok()) finisher_.Finish(std::move(lost->record));
    return;
  }
  // If the gateway cannot hand it over, an Undeliverable event requeues it.
  for (auto& ack : acks_.TakeFor(req.worker)) Send(req.worker, protocol::ResultAck{std::move(ack)});
  Send(req.worker, protocol::Message(std::move(execute)));
  table_.Assign(req.worker, id, common::NowMs());
  if (options_.metrics) options_.metrics->Started(spec.tenant, spec.language);
  in_flight_.emplace(id, InFlight{std::move(spec), std::move(record), std::move(req.worker)});
}

void Dispatcher::CancelNow(const std::string& job_id) {
  auto it = in_flight_.find(job_id);
  if (it != in_flight_.end()) Send(it->second.worker, protocol::Cancel{job_id});
}

void Dispatcher::Send(const std::string& worker, protocol::Message m) {
  gateway_->Send(worker, std::move(m));
}

void Dispatcher::HandleEvents() {
  std::deque<GatewayEvent> events = gateway_->TakeEvents();
  if (events.empty()) return;
  // A job's chunks are stored before its end: the chunks of every Result
  // here came before it, so they are in the buffer now.
  std::vector<std::string> ending;
  for (const auto& e : events) {
    if (const auto* r = std::get_if<WorkerResult>(&e)) ending.push_back(r->result.job_id);
  }
  if (!ending.empty()) StoreOutput(output_.Take(ending));
  for (auto& e : events) {
    std::visit(
        [this](auto& ev) {
          using T = std::decay_t<decltype(ev)>;
          if constexpr (std::is_same_v<T, WorkerRegistered>) {
            OnRegistered(ev);
          } else if constexpr (std::is_same_v<T, WorkerBeat>) {
            OnBeat(ev);
          } else if constexpr (std::is_same_v<T, WorkerResult>) {
            OnResult(ev);
          } else if constexpr (std::is_same_v<T, WorkerGone>) {
            OnGone(ev);
          } else {
            OnUndeliverable(ev);
          }
        },
        e);
  }
}

void Dispatcher::StoreOutput(std::vector<JobOutput> batch) {
  if (batch.empty()) return;
  auto t0 = Clock::now();
  auto stored = stores_.jobs->AppendOutput(batch);
  if (options_.metrics) options_.metrics->RedisCall("output", SecondsSince(t0));
  if (!stored.ok()) {
    if (options_.metrics) options_.metrics->RedisError();
    // One per batch while Redis fails, and a worker sends chunks at will.
    static common::LogLimiter limit(kHostileLines, kLogWindow);
    kLog.Warn(limit, {}, "{} (live output lost; each job's end completes its stream)",
              stored.status().ToString());
    return;
  }
  size_t entries = 0;
  for (size_t i = 0; i < batch.size() && i < stored->size(); ++i) {
    entries += (*stored)[i].entries;
    if ((*stored)[i].foreign) {
      static common::LogLimiter limit(kHostileLines, kLogWindow);
      kJobsLog.Warn(limit, {.job = batch[i].job_id, .worker = batch[i].worker},
                    "output refused: the job runs on another worker");
      if (options_.metrics) options_.metrics->WorkerRefused("not_its_job");
    }
    auto it = in_flight_.find(batch[i].job_id);
    if (it != in_flight_.end() && (*stored)[i].running) it->second.stored = (*stored)[i];
  }
  if (options_.metrics) options_.metrics->OutputStored(entries);
}

void Dispatcher::OnRegistered(WorkerRegistered& e) {
  const protocol::Register& reg = e.reg;
  auto outcome = table_.OnRegister(e.worker, reg, common::NowMs());
  if (outcome.restarted) {
    LoseWorker(e.worker, outcome.lost, "the worker restarted");
  } else if (!outcome.lost.empty()) {
    LoseJobs(e.worker, outcome.lost, "the worker reconnected without it");
  }
  // Session executions chosen from now on may go to it (its old sessions
  // are marked lost in Redis by now, unless that waits for a retry).
  if (outcome.fresh && sessions_to_lose_.count(e.worker) == 0) {
    table_.SetSessionsFrom(e.worker, common::NowMs());
  }
  static common::LogLimiter limit(kRoutineLines, kLogWindow);
  kLog.Info(
      limit, {.worker = reg.worker_id},
      "worker registered: {} slots, runtimes [{}], isolation {}, layers [{}], holding {} jobs, "
      "{} packages ({} entries refused)",
      reg.slots, fmt::join(reg.runtimes, ","), NormalizeIsolation(reg.isolation),
      fmt::join(reg.sandbox_layers, ","), reg.held_jobs.size(), reg.packages.size(),
      table_.workers().at(e.worker).catalog->dropped);
  PublishWorkers();
  pump_due_ = true;  // new slots: queued jobs may run
}

void Dispatcher::OnBeat(WorkerBeat& e) {
  if (table_.OnHeartbeat(e.worker, e.beat, common::NowMs())) PublishWorkers();
}

void Dispatcher::OnUndeliverable(Undeliverable& e) {
  auto it = in_flight_.find(e.job_id);
  if (it == in_flight_.end() || it->second.worker != e.worker) return;
  kJobsLog.Info({.job = e.job_id, .worker = e.worker},
                "the job could not be handed to its worker: requeueing");
  in_flight_.erase(it);
  table_.Release(e.worker, e.job_id);
  Requeue(e.job_id);
}

void Dispatcher::OnResult(WorkerResult& e) {
  const std::string& identity = e.worker;
  protocol::Result& res = e.result;
  auto it = in_flight_.find(res.job_id);
  if (it == in_flight_.end() || it->second.worker != identity) {
    FinishForeign(identity, res);
    return;
  }
  // A copy (a running record holds no output yet): should the transition
  // be refused, the job stays in flight and the overdue check ends it.
  auto t = JobLifecycle::Apply(
      it->second.record, {.event = res.reason == protocol::EndReason::kRefused ? JobEvent::kRefused
                                                                               : JobEvent::kResult,
                          .now_ms = common::NowMs(),
                          .result = &res});
  if (!t.ok()) {
    kJobsLog.Error({.job = res.job_id, .worker = identity}, "result not applied: {}",
                   t.status().ToString());
    return;
  }
  if (t->Has(JobAction::kSchedule)) {
    // It never ran (the worker's slots are taken, or it is draining): back to
    // its place in the queue; the worker gets nothing until its next heartbeat.
    kJobsLog.Debug({.job = res.job_id, .worker = identity}, "refused by the worker: {}",
                   res.worker_error);
    in_flight_.erase(it);
    table_.Release(identity, res.job_id);
    table_.MarkFull(identity);
    PublishWorkers();
    if (options_.metrics) options_.metrics->Requeued();
    if (Requeue(res.job_id)) Send(identity, protocol::ResultAck{res.job_id});
    return;
  }
  JobRecord record = std::move(t->record);
  JobSpec spec = std::move(it->second.spec);
  const StoredOutput stored = it->second.stored;
  in_flight_.erase(it);
  table_.Release(identity, res.job_id);
  RenewEpoch(res, &record);
  finisher_.Finish(std::move(record), {.session_reset = res.session_reset,
                                       .spec = std::move(spec),
                                       .worker = identity,
                                       .stored = stored});
}

void Dispatcher::RenewEpoch(const protocol::Result& res, JobRecord* record) {
  if (!res.session_reset || record->session_id.empty()) return;
  auto incarnation = stores_.schedule->NewSessionEpoch();
  if (!incarnation.ok()) {
    if (options_.metrics) options_.metrics->RedisError();
    kLog.Error({.job = record->id, .session = record->session_id, .tenant = record->tenant},
               "session lost its state but no new epoch could be allocated: {}",
               incarnation.status().ToString());
    return;
  }
  // One execution of a session runs at a time: the generation it started
  // under is the session's, and the next one is one more.
  record->session_incarnation = *incarnation;
  record->session_epoch = record->session_epoch.value_or(0) + 1;
}

void Dispatcher::FinishForeign(const std::string& identity, const protocol::Result& res) {
  // A job this broker did not dispatch (its broker died or restarted, and the
  // worker sends results to any live broker), or sent again after a
  // reconnect: the ledger in Redis decides. A job that already ended (e.g.
  // WORKER_LOST while the worker was away past its window) keeps its one
  // terminal state (the finish script checks). Only what Redis answered is
  // acknowledged: otherwise the worker keeps the Result and sends it again.
  auto record = stores_.jobs->Load(res.job_id);
  if (!record.ok() && record.status().code() != Code::kNotFound) {
    if (options_.metrics) options_.metrics->RedisError();
    return;
  }
  // A worker may send results for any job id: only a running job takes one,
  // and only from the worker it runs on.
  if (record.ok() && record->status == JobStatus::kRunning && record->worker != identity) {
    static common::LogLimiter limit(kHostileLines, kLogWindow);
    kJobsLog.Warn(limit, {.job = res.job_id, .worker = identity},
                  "result refused: the job runs on worker '{}'", record->worker);
    if (options_.metrics) options_.metrics->WorkerRefused("not_its_job");
    Send(identity, protocol::ResultAck{res.job_id});
    return;
  }
  if (res.reason == protocol::EndReason::kRefused) {
    if (Requeue(res.job_id)) Send(identity, protocol::ResultAck{res.job_id});
    return;
  }
  auto t =
      record.ok()
          ? JobLifecycle::Apply(
                *record, {.event = JobEvent::kResult, .now_ms = common::NowMs(), .result = &res})
          : common::StatusOr<JobTransition>(record.status());
  if (!t.ok() || !t->Has(JobAction::kStoreEnd)) {
    static common::LogLimiter limit(kHostileLines, kLogWindow);
    kJobsLog.Warn(limit, {.job = res.job_id, .worker = identity}, "result ignored: {}",
                  !t.ok() ? t.status().ToString() : "it has already ended");
    Send(identity, protocol::ResultAck{res.job_id});
    return;
  }
  JobRecord ended = std::move(t->record);
  RenewEpoch(res, &ended);
  kJobsLog.Info({.job = res.job_id, .tenant = ended.tenant, .worker = identity},
                "storing the result of a job another broker dispatched");
  finisher_.Finish(std::move(ended), {.session_reset = res.session_reset, .worker = identity});
}

void Dispatcher::OnGone(WorkerGone& e) {
  auto jobs = table_.Remove(e.worker);
  LoseWorker(e.worker, jobs, e.why, e.expired);
  PublishWorkers();
}

void Dispatcher::Pump() {
  pump_due_ = false;
  auto t0 = Clock::now();
  auto started = stores_.schedule->Pump(Candidates(), common::NowMs());
  if (options_.metrics) options_.metrics->RedisCall("pump", SecondsSince(t0));
  if (!started.ok()) {
    if (options_.metrics) options_.metrics->RedisError();
    pump_due_ = true;
    return;
  }
  StartAll(*started);
  // A full budget means more may be startable at once.
  if (started->size() >= stores_.schedule->settings().budget) pump_due_ = true;
}

bool Dispatcher::Requeue(const std::string& job_id) {
  auto started = stores_.schedule->Requeue(job_id, Candidates(), common::NowMs());
  if (!started.ok()) {
    // It stays `running` on our name in Redis: a later tick adopts it as a
    // stray and the overdue check ends it. Log loudly.
    if (options_.metrics) options_.metrics->RedisError();
    kJobsLog.Error({.job = job_id}, "could not requeue: {}", started.status().ToString());
    return false;
  }
  StartAll(*started);
  pump_due_ = true;
  return true;
}

void Dispatcher::PublishWorkers() {
  std::vector<WorkerView> views;
  uint64_t slots = 0, busy = 0;
  for (const auto& [id, w] : table_.workers()) {
    slots += w.reg.slots;
    busy += WorkerTable::Busy(w);
    views.push_back(
        WorkerView{w.reg.worker_id, w.reg.hostname, w.reg.runtimes, w.reg.sandbox_layers,
                   std::string(NormalizeIsolation(w.reg.isolation)), w.reg.slots,
                   static_cast<uint32_t>(WorkerTable::Busy(w)), w.draining, w.registered_at_ms,
                   w.last_seen_ms, w.reg.metrics_endpoint, w.catalog});
  }
  auto candidates = table_.Candidates(options_.worker_slot_cap);
  if (options_.metrics) options_.metrics->SetWorkers(views.size(), slots, busy);
  std::lock_guard lock(mu_);
  worker_views_ = std::move(views);
  candidates_ = std::move(candidates);
}

}  // namespace kiln::broker
