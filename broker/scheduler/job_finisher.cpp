#include "broker/scheduler/job_finisher.hpp"

#include "broker/metrics/broker_metrics.hpp"
#include "broker/scheduler/audit_writer.hpp"
#include "broker/scheduler/scheduler_log.hpp"
#include "common/clock.hpp"
#include "common/json/bounded_json.hpp"

namespace kiln::broker {
namespace {

using namespace scheduler_log;
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The state the finish script must find the job in for `t` to apply.
FinishExpect ExpectFor(const JobTransition& t) {
  switch (t.from) {
    case JobStatus::kQueued:
      return FinishExpect::kQueued;
    case JobStatus::kAwaitingApproval:
      return FinishExpect::kAwaitingApproval;
    default:
      return FinishExpect::kAny;
  }
}

// Marks the ends being stored for as long as it lives (JobWaiters::Storing):
// the "done" notices they publish are this broker's own, so the EventBus
// leaves their waiters to us instead of loading each record again.
class StoringMarks {
 public:
  StoringMarks(JobWaiters* waiters, std::vector<std::string> ids)
      : waiters_(waiters), ids_(std::move(ids)) {
    for (const auto& id : ids_) waiters_->Storing(id);
  }
  ~StoringMarks() {
    for (const auto& id : ids_) waiters_->DoneStoring(id);
  }
  StoringMarks(const StoringMarks&) = delete;
  StoringMarks& operator=(const StoringMarks&) = delete;

 private:
  JobWaiters* waiters_;
  std::vector<std::string> ids_;
};

}  // namespace

JobFinisher::JobFinisher(JobStore* jobs, ScheduleStore* schedule, JobWaiters* waiters,
                         BrokerMetrics* metrics, AuditWriter* audit, size_t max_unsaved_bytes,
                         FinisherHooks hooks)
    : jobs_(jobs),
      schedule_(schedule),
      waiters_(waiters),
      metrics_(metrics),
      audit_(audit),
      max_unsaved_bytes_(max_unsaved_bytes),
      hooks_(std::move(hooks)) {}

common::StatusOr<FinishOutcome> JobFinisher::EndJob(const JobTransition& t) {
  const JobRecord& record = t.record;
  auto t0 = Clock::now();
  StoringMarks marks(waiters_, {record.id});
  auto out = schedule_->Finish(record, ExpectFor(t), hooks_.candidates(), common::NowMs());
  if (metrics_) metrics_->RedisCall("finish", SecondsSince(t0));
  if (!out.ok()) {
    if (metrics_) metrics_->RedisError();
    return out.status();
  }
  if (out->kind == FinishOutcome::Kind::kStored) {
    Counted(record);
    waiters_->Notify(record);
    if (audit_) audit_->Add(record, nullptr, out->approval);
  } else if (out->kind == FinishOutcome::Kind::kEnded) {
    NotifyStoredEnd(record.id);
  }
  hooks_.start(out->started);
  return out;
}

void JobFinisher::Finish(JobRecord record, FinishContext ctx) {
  ending_.push_back({std::move(record), std::move(ctx)});
}

void JobFinisher::Flush() {
  if (ending_.empty()) return;
  std::vector<Ending> batch;
  batch.swap(ending_);
  std::vector<std::string> ids;
  ids.reserve(batch.size());
  for (const auto& e : batch) ids.push_back(e.record.id);
  StoringMarks marks(waiters_, std::move(ids));
  auto t0 = Clock::now();
  // Each stream gets what it lacks of the output before the ends are
  // stored: a subscriber reads every byte, then the end.
  std::vector<JobOutput> tails;
  for (const auto& e : batch) {
    if (e.ctx.worker.empty()) continue;
    auto tail = JobStore::OutputTail(e.record, e.ctx.stored.value_or(StoredOutput{}));
    if (!tail.chunks.empty()) tails.push_back(std::move(tail));
  }
  if (!tails.empty()) {
    if (auto st = jobs_->AppendOutput(tails); !st.ok()) {
      if (metrics_) metrics_->RedisError();
      for (auto& e : batch) Keep(std::move(e));
      return;
    }
  }
  // Each record is serialized once: for Redis, and for waiters that answer with it.
  std::vector<std::string> jsons;
  jsons.reserve(batch.size());
  std::vector<ScheduleStore::FinishItem> items;
  items.reserve(batch.size());
  for (const auto& e : batch) {
    jsons.push_back(common::DumpJson(e.record.ToJson()));
    items.push_back({&e.record, FinishExpect::kAny, e.ctx.session_reset, &jsons.back()});
  }
  auto outs = schedule_->FinishAll(items, hooks_.candidates(), common::NowMs());
  if (metrics_) metrics_->RedisCall("finish", SecondsSince(t0));
  for (size_t i = 0; i < batch.size(); ++i) {
    const common::Status st = !outs.ok() ? outs.status() : (*outs)[i].status();
    if (!st.ok()) {
      if (metrics_) metrics_->RedisError();
      Keep(std::move(batch[i]));
      continue;
    }
    Stored(batch[i].record, batch[i].ctx, *(*outs)[i], &jsons[i]);
  }
}

void JobFinisher::Keep(Ending e) {
  JobRecord& record = e.record;
  kJobsLog.Error({.job = record.id, .tenant = record.tenant},
                 "could not store the result (kept in memory, retried every tick)");
  // Waiters get it now; Redis gets it on a later tick.
  waiters_->Notify(record);
  const size_t bytes = record.stdout_data.size() + record.stderr_data.size() + 4096;
  if (unsaved_bytes_ + bytes > max_unsaved_bytes_) {
    // Bounded: the worker keeps an unacknowledged Result and sends it again;
    // an end with no Result (WORKER_LOST, overdue) is decided again by the
    // broker that owns the job when its lease or overdue check comes round.
    static common::LogLimiter limit(kHostileLines, kLogWindow);
    kJobsLog.Error(limit, {.job = record.id},
                   "{} bytes of results wait for Redis: not keeping this one", unsaved_bytes_);
    return;
  }
  unsaved_bytes_ += bytes;
  unsaved_.push_back(Unsaved{std::move(record), e.ctx.session_reset, e.ctx.worker, bytes});
}

void JobFinisher::RetryUnsaved() {
  // The first refusal ends the round (Redis is still away: each call would
  // wait its timeout).
  while (!unsaved_.empty()) {
    Unsaved& u = unsaved_.front();
    if (!TryFinish(u.record, {.session_reset = u.session_reset, .worker = u.worker})) break;
    unsaved_bytes_ -= u.bytes;
    unsaved_.pop_front();
  }
}

std::set<std::string> JobFinisher::UnsavedIds() const {
  std::set<std::string> ids;
  for (const auto& u : unsaved_) ids.insert(u.record.id);
  for (const auto& e : ending_) ids.insert(e.record.id);
  return ids;
}

bool JobFinisher::TryFinish(const JobRecord& record, const FinishContext& ctx) {
  StoringMarks marks(waiters_, {record.id});
  auto t0 = Clock::now();
  if (!ctx.worker.empty()) {
    auto tail = JobStore::OutputTail(record, ctx.stored.value_or(StoredOutput{}));
    if (!tail.chunks.empty() && !jobs_->AppendOutput({std::move(tail)}).ok()) {
      if (metrics_) metrics_->RedisError();
      return false;
    }
  }
  auto out = schedule_->Finish(record, FinishExpect::kAny, hooks_.candidates(), common::NowMs(),
                               ctx.session_reset);
  if (metrics_) metrics_->RedisCall("finish", SecondsSince(t0));
  if (!out.ok()) {
    if (metrics_) metrics_->RedisError();
    return false;
  }
  Stored(record, ctx, *out);
  return true;
}

void JobFinisher::Stored(const JobRecord& record, const FinishContext& ctx,
                         const FinishOutcome& out, const std::string* json) {
  if (out.kind == FinishOutcome::Kind::kStored) {
    Counted(record);
    waiters_->Notify(record, json);
    // After the waiters: the writer's thread wakes once the answer is on its way.
    if (audit_) audit_->Add(record, ctx.spec ? &*ctx.spec : nullptr, out.approval);
  } else if (out.kind == FinishOutcome::Kind::kEnded) {
    kJobsLog.Info({.job = record.id, .tenant = record.tenant},
                  "the job had already ended ({}); its later end is dropped", out.status);
    NotifyStoredEnd(record.id);
  }
  if (!ctx.worker.empty()) hooks_.ack(ctx.worker, record.id);
  hooks_.start(out.started);
}

void JobFinisher::NotifyStoredEnd(const std::string& id) {
  // Whoever ended it first published "done" while we were marked as storing
  // it, and the EventBus left it to us.
  if (!waiters_->Waiting(id)) return;
  auto stored = jobs_->Load(id);
  if (stored.ok() && IsTerminal(stored->status)) waiters_->Notify(*stored);
}

void JobFinisher::Counted(const JobRecord& record) {
  if (metrics_) metrics_->Finished(record);
  if (kJobsLog.enabled(spdlog::level::info)) {
    kJobsLog.Info({.job = record.id,
                   .session = record.session_id,
                   .tenant = record.tenant,
                   .worker = record.worker},
                  "job ended: {} {}{}{} in {:.1f} ms", record.language,
                  JobStatusName(record.status), record.error ? " " : "",
                  record.error ? record.error->code : std::string(),
                  record.duration_ms.value_or(0));
  }
}

}  // namespace kiln::broker
