// ScheduleStore: the scheduling state every broker shares through Redis —
// slot leases (global, per tenant, per worker), fair tenant queues, session
// affinity, the broker registry and each broker's jobs in flight. Each call
// is one Lua script (schedule_scripts.cpp, schedule_recovery_scripts.cpp),
// so limits hold however many brokers run it at once.
//
//   ScheduleStore sched(pool, settings);
//   auto out = sched.Submit(spec, idem_key, quota, workers, NowMs());
//   if (out->kind == SubmitOutcome::Kind::kStarted) dispatcher.Start(...);
//   ...
//   auto fin = sched.Finish(record, FinishExpect::kAny, workers, NowMs());  // + starts queued jobs
//
// Round trips: one per call (FinishAll: one for any number of jobs). A job
// costs two: Submit (stores it, takes its leases and marks it running, or
// queues it) and Finish (stores the terminal
// record, releases the leases, starts what was waiting). Thread-safe (each
// call leases its own connection).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "broker/job/job.hpp"
#include "broker/store/redis_connection.hpp"
#include "broker/store/redis_keys.hpp"
#include "common/status.hpp"

namespace kiln::broker {

// A live worker a job may be sent to, as the calling broker sees it.
struct WorkerSlots {
  std::string id;
  uint32_t slots = 0;  // the per-worker limit
  // The placement tokens it offers (PlacementToken, broker/job/isolation.hpp),
  // commas at both ends: ",python,shell," or ",python@gvisor,shell@gvisor,".
  std::string runtimes;
};

struct ScheduleSettings {
  std::string broker_id;
  uint64_t global_slots = 0;  // 0: no global limit beyond the workers' slots
  uint64_t lease_ms = 15000;  // a slot lease lives this long unless renewed
  uint64_t job_ttl_s = 86400;
  uint64_t session_ttl_ms = 600000;  // idle sessions expire after this
  uint32_t sessions_per_worker = 64;
  uint32_t scan = 8;     // queue entries tried per tenant per pass
  uint32_t budget = 16;  // jobs one script starts at most
};

struct TenantQuota {
  uint64_t max_queue = 1000;
  uint32_t max_sessions = 100;
  // Without auto-approval the job waits for an admin (unless its session is
  // trusted) until approval_deadline_ms.
  bool needs_approval = false;
  int64_t approval_deadline_ms = 0;
};

// A job a script started: send it to `worker`. An empty `worker` is a
// queued execution of a lost session: the caller ends it SESSION_LOST.
struct StartedJob {
  std::string job_id;
  std::string worker;
  std::string spec_json;
  std::optional<SessionEpoch> session_epoch;
  int64_t decided_ms = 0;  // the broker's clock before the script was sent
};

struct SubmitOutcome {
  // kUnconfirmed: Redis got the script but its answer was lost (timed out,
  // connection lost): the job may or may not be stored. It was not started
  // by this call, and a script Redis runs late stores nothing.
  enum class Kind { kStarted, kQueued, kReplay, kHeld, kUnconfirmed };
  Kind kind = Kind::kQueued;
  std::string error;      // kUnconfirmed: what went wrong
  std::string worker;     // kStarted
  std::string replay_id;  // kReplay: the job an earlier request with the key created
  uint64_t position = 0;  // kQueued: 1 is next
  std::string wait_reason;
  std::optional<SessionEpoch> session_epoch;
};

enum class FinishExpect { kAny, kQueued, kAwaitingApproval };

struct FinishOutcome {
  enum class Kind {
    kStored,     // this call ended the job
    kEnded,      // it had already ended: nothing written
    kMissing,    // no such job (expired)
    kNotQueued,  // not in the expected state (e.g. it started meanwhile)
  };
  Kind kind = Kind::kStored;
  std::string status;    // the job's status after the call
  std::string approval;  // kStored: auto, trusted_session, admin:<n> or none
  std::vector<StartedJob> started;
};

// A job this broker has in flight, for lease renewal.
struct InFlightRef {
  std::string id;
  std::string tenant;
  std::string worker;
};

struct TickOutcome {
  std::vector<std::string> not_owned;  // in flight here, but ended or taken over elsewhere
  uint64_t global_leases = 0;
  uint64_t brokers_live = 0;
  struct Tenant {
    std::string name;
    uint64_t queued = 0;
    uint64_t leases = 0;
  };
  std::vector<Tenant> tenants;
  uint64_t sessions = 0;
  uint64_t approvals_pending = 0;
  std::vector<std::string> approvals_expired;                         // to end APPROVAL_EXPIRED
  std::vector<std::pair<std::string, std::string>> sessions_expired;  // (worker, session)
  std::vector<std::string> strays;  // running on this broker's name, not held by it
};

struct ApproveOutcome {
  enum class Kind { kStarted, kQueued, kMissing, kNotAwaiting, kSessionGone };
  Kind kind = Kind::kQueued;
  std::string status;  // kNotAwaiting: what it is now
  std::optional<StartedJob> started;
};

class ScheduleStore {
 public:
  ScheduleStore(RedisPool* pool, ScheduleSettings settings)
      : pool_(pool), settings_(std::move(settings)) {}

  const ScheduleSettings& settings() const { return settings_; }

  // Publishes tenants' slot limits and weights for every broker's scripts.
  struct TenantShare {
    std::string name;
    uint64_t slots = 0;  // 0: no tenant limit
    uint32_t weight = 1;
  };
  common::Status PublishTenants(const std::vector<TenantShare>& tenants);

  // Stores a new job and starts it if a slot is free, else queues it.
  // Errors: QUEUE_FULL, SESSION_FORBIDDEN, SESSION_LANGUAGE_MISMATCH,
  // SESSION_LOST, SESSION_BUSY_LIMIT (nothing stored), UNAVAILABLE.
  common::StatusOr<SubmitOutcome> Submit(const JobSpec& spec, const std::string& idempotency_key,
                                         const TenantQuota& quota,
                                         const std::vector<WorkerSlots>& workers, int64_t now_ms);
  // `session_reset`: the worker's interpreter for the record's session lost
  // its state; the record already carries the session's new epoch (a new
  // incarnation from NewSessionEpoch, the next generation), which the
  // session takes.
  common::StatusOr<FinishOutcome> Finish(const JobRecord& terminal, FinishExpect expect,
                                         const std::vector<WorkerSlots>& workers, int64_t now_ms,
                                         bool session_reset = false);
  // Finish for many jobs in one round trip (a loop turn's ends): each runs
  // the same script, in order. The outer error is the connection's; each
  // inner one that job's.
  struct FinishItem {
    const JobRecord* record;
    FinishExpect expect = FinishExpect::kAny;
    bool session_reset = false;
    const std::string* record_json = nullptr;  // DumpJson(record->ToJson()), if made already
  };
  common::StatusOr<std::vector<common::StatusOr<FinishOutcome>>> FinishAll(
      const std::vector<FinishItem>& items, const std::vector<WorkerSlots>& workers,
      int64_t now_ms);
  // An incarnation never used before (sessions are created and reset with one).
  common::StatusOr<uint64_t> NewSessionEpoch();
  // A worker refused a started job: back to its place in the queue.
  common::StatusOr<std::vector<StartedJob>> Requeue(const std::string& job_id,
                                                    const std::vector<WorkerSlots>& workers,
                                                    int64_t now_ms);
  // An admin approved a job awaiting approval (`approver`: "admin:<n>").
  common::StatusOr<ApproveOutcome> Approve(const std::string& job_id, bool trust_session,
                                           const std::string& approver,
                                           const std::vector<WorkerSlots>& workers, int64_t now_ms);
  // Jobs awaiting approval, oldest deadline first: (id, deadline ms).
  common::StatusOr<std::vector<std::pair<std::string, int64_t>>> PendingApprovals(size_t limit);
  // Starts queued jobs that can run now.
  common::StatusOr<std::vector<StartedJob>> Pump(const std::vector<WorkerSlots>& workers,
                                                 int64_t now_ms);
  // Renews this broker's registration and its jobs' leases; reads the gauges.
  // `workers`: the ids this broker knows, whose expired sessions it reports.
  // Strays: jobs running on this broker's name, not in `in_flight`, started
  // before stray_before_ms.
  common::StatusOr<TickOutcome> Tick(const std::vector<InFlightRef>& in_flight, int64_t now_ms,
                                     int64_t broker_dead_after_ms,
                                     const std::vector<std::string>& workers = {},
                                     int64_t stray_before_ms = 0);
  // Takes over the jobs in flight of brokers silent since dead_before_ms (and
  // this broker's own from before a restart, when include_self). Returns
  // (job id, worker) pairs.
  common::StatusOr<std::vector<std::pair<std::string, std::string>>> Claim(int64_t dead_before_ms,
                                                                           bool include_self);
  // Tells every broker to cancel a running job (the one that owns it acts).
  common::Status PublishCancel(const std::string& job_id);

  static constexpr const char* kEventsChannel = keys::kEvents;

 private:
  // Appends the scripts' scheduling context; returns where its deadline goes.
  size_t AppendContext(std::vector<std::string>* args, const std::vector<WorkerSlots>& workers,
                       int64_t now_ms) const;
  // Runs a script that may start jobs, fenced: if Redis runs it later than
  // the broker waits for its answer, it starts nothing (docs/architecture.md).
  // `unanswered`, if set, tells a failure after Redis got the script whole.
  common::StatusOr<RedisReply> EvalFenced(const RedisScript& script, std::vector<std::string>* args,
                                          size_t deadline_at, bool* unanswered = nullptr);
  // The finish script's ARGV before the context, and its reply read.
  std::vector<std::string> FinishArgs(const FinishItem& item) const;
  static common::StatusOr<FinishOutcome> ParseFinish(const RedisReply& r, int64_t now_ms);

  RedisPool* pool_;
  ScheduleSettings settings_;
};

}  // namespace kiln::broker
