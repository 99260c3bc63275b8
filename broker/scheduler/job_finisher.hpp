// JobFinisher: where every terminal record of a job is stored, once. It
// carries out a lifecycle transition's JobAction::kStoreEnd: completes the
// job's output stream from the record (a subscriber reads every byte, then
// the end), runs the finish script (stores the record if the job has not
// ended already, releases its slots, starts queued jobs), then counts it
// (metrics, the "jobs" log line), wakes its waiters (marked in JobWaiters
// while stored, so the EventBus does not load them again on this broker's
// own "done") and queues its audit entry. A record Redis refuses is kept in
// memory (bounded) and retried.
//
//   JobFinisher finisher(stores, &waiters, metrics, audit, max_unsaved_bytes, hooks);
//   finisher.Finish(std::move(record), {.spec = std::move(spec), .worker = worker});  // loop
//   finisher.Flush();                                              // end of the loop's turn
//   ASSIGN_OR_RETURN(FinishOutcome out, finisher.EndJob(transition));  // any thread
//
// The Dispatcher owns it. EndJob() is thread-safe (front ends call it for
// jobs not in flight here); Finish(), Flush(), RetryUnsaved() and the rest
// belong to the dispatcher's loop thread.
#pragma once

#include <deque>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "broker/job/job.hpp"
#include "broker/job/lifecycle.hpp"
#include "broker/scheduler/job_waiters.hpp"
#include "broker/store/job_store.hpp"
#include "broker/store/schedule_store.hpp"
#include "common/status.hpp"

namespace kiln::broker {

class AuditWriter;
class BrokerMetrics;

// What the finisher needs of the dispatcher that owns it.
struct FinisherHooks {
  // Workers that may take the jobs a freed slot starts.
  std::function<std::vector<WorkerSlots>()> candidates;
  // Jobs the finish script started: send them.
  std::function<void(const std::vector<StartedJob>&)> start;
  // The worker that sent a Result gets its ResultAck once it is stored.
  std::function<void(const std::string& worker, const std::string& job_id)> ack;
};

// How a job that ran ended, beyond its record.
struct FinishContext {
  bool session_reset = false;          // its session lost its state
  std::optional<JobSpec> spec;         // for the audit trail (else it is read from Redis)
  std::string worker;                  // sent a Result to acknowledge; empty: none
  std::optional<StoredOutput> stored;  // how much of its output is stored already
};

class JobFinisher {
 public:
  JobFinisher(JobStore* jobs, ScheduleStore* schedule, JobWaiters* waiters, BrokerMetrics* metrics,
              AuditWriter* audit, size_t max_unsaved_bytes, FinisherHooks hooks);

  // kStoreEnd for a job not in flight here (queued, held, a lost session):
  // stored only if the job is still in `t.from`. Nothing is kept on failure.
  common::StatusOr<FinishOutcome> EndJob(const JobTransition& t);

  // The end of a job that ran (its Result, WORKER_LOST, overdue), stored
  // at the next Flush(): a loop turn's ends share its round trips.
  void Finish(JobRecord record, FinishContext ctx = {});
  // Stores the ends Finish() took since the last call: what their output
  // streams lack in one round trip, their finish scripts in another. Redis
  // refusing one keeps it for RetryUnsaved (its waiters are told now).
  void Flush();
  // Stores kept records, oldest first, until Redis refuses one.
  void RetryUnsaved();
  size_t unsaved() const { return unsaved_.size(); }
  // Ids of the records not stored yet (ended here: not strays).
  std::set<std::string> UnsavedIds() const;

 private:
  struct Ending {
    JobRecord record;
    FinishContext ctx;
  };
  struct Unsaved {
    JobRecord record;
    bool session_reset = false;
    std::string worker;
    size_t bytes = 0;
  };
  // False when Redis refused it (nothing was told to anyone).
  bool TryFinish(const JobRecord& record, const FinishContext& ctx);
  // The finish script stored (or declined) the end: count it, acknowledge
  // the worker's Result, start what its slots let run.
  // `json`: the record as stored (DumpJson), if made already.
  void Stored(const JobRecord& record, const FinishContext& ctx, const FinishOutcome& out,
              const std::string* json = nullptr);
  // Redis refused the end: waiters learn it now, Redis on a later tick.
  void Keep(Ending e);
  // The job had ended already (another broker or path stored its end):
  // its waiters get the stored record, since the EventBus left its "done"
  // notice to us while we were storing.
  void NotifyStoredEnd(const std::string& id);
  // A terminal record stored here: metrics and the log line, before its
  // waiters hear of it (the audit entry is queued after them).
  void Counted(const JobRecord& record);

  JobStore* jobs_;
  ScheduleStore* schedule_;
  JobWaiters* waiters_;
  BrokerMetrics* metrics_;  // may be null
  AuditWriter* audit_;      // may be null
  size_t max_unsaved_bytes_;
  FinisherHooks hooks_;
  std::vector<Ending> ending_;  // since the last Flush()
  std::deque<Unsaved> unsaved_;
  size_t unsaved_bytes_ = 0;
};

}  // namespace kiln::broker
