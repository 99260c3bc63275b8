// The life of one job as an I/O-free state machine: (state, event) →
// (record, actions). Every record the broker stores for a job once it has
// been decided — and every terminal record — is built here and nowhere else;
// the callers (the execution front ends, the submit service, the
// dispatcher) carry out the actions it names and decide nothing themselves.
//
//   auto t = JobLifecycle::Apply(*record, {.event = JobEvent::kCancel, .now_ms = NowMs()});
//   if (!t.ok()) return t.status();            // this state does not take the event
//   if (t->Has(JobAction::kStoreEnd)) dispatcher->EndJob(*t);  // only while still t->from
//   if (t->Has(JobAction::kTellWorker)) schedule->PublishCancel(t->record.id);
//
// The states are JobStatus (broker/job/job.hpp); a terminal state takes
// every event as a no-op (nothing to do), so a late or repeated event — a
// second cancel, a result after the job was declared lost — changes nothing.
// Pure functions of their arguments: any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "broker/job/job.hpp"
#include "common/protocol/messages.hpp"
#include "common/status.hpp"

namespace kiln::broker {

enum class JobEvent {
  kSubmit,           // admitted at submit: queued (Begin)
  kRefuse,           // refused at submit (policy): rejected (Begin)
  kApprove,          // an admin approved a held job: queued, then scheduled
  kDeny,             // an admin denied a held job
  kApprovalExpired,  // no admin answered within the approval window
  kStart,            // the scheduler gave a queued job to `worker`
  kResult,           // the worker's Result for a running job
  kRefused,          // its worker refused it unrun (slots taken, draining): queued again
  kCancel,           // a client cancels it
  kSessionDeleted,   // its session was deleted
  kSessionLost,      // its session's state is gone (worker lost or restarted) before it ran
  kWorkerLost,       // the worker running it is gone
  kOverdue,          // no result long after its timeout
};
inline constexpr int kJobEventCount = 13;

const char* JobEventName(JobEvent e);

// What an event carries; each field says which events read it.
struct JobInput {
  JobEvent event = JobEvent::kSubmit;
  int64_t now_ms = 0;
  // kRefuse: the refusal's code and message. kDeny: who denied ("admin:0").
  // kWorkerLost: why the worker is gone. kSessionLost: what happened.
  common::Code code = common::Code::kOk;
  std::string detail;
  // kStart, kSessionLost: the worker it was given to and the session's epoch.
  std::string worker;
  std::optional<SessionEpoch> session_epoch;
  // kResult (required).
  const common::protocol::Result* result = nullptr;
};

// What the caller must do with a transition, in this order. Flags: several
// may be set.
enum class JobAction : uint32_t {
  kNone = 0,
  // Store the terminal `record` only if the job is still in `from` (the
  // dispatcher's EndJob, whose script checks it): it may have moved on since
  // it was read, and then this transition is void.
  kStoreEnd = 1u << 0,
  // Run the scheduling script for it (it may start at once).
  kSchedule = 1u << 1,
  // Send the job to `record.worker` (protocol::Execute).
  kSendToWorker = 1u << 2,
  // Have the worker that runs it stop it (published to whichever broker
  // dispatched it; also reaches a job that started after it was read). Its
  // Result then ends it.
  kTellWorker = 1u << 3,
};

struct JobTransition {
  JobStatus from = JobStatus::kQueued;
  JobRecord record;  // the record after the event
  uint32_t actions = 0;

  bool Has(JobAction a) const { return (actions & static_cast<uint32_t>(a)) != 0; }
  bool None() const { return actions == 0; }
};

class JobLifecycle {
 public:
  // The first record of a submission: kSubmit (queued, kSchedule) or
  // kRefuse (rejected with `code` and `detail`, kStoreEnd). Other events are
  // INTERNAL errors.
  static common::StatusOr<JobTransition> Begin(const JobSpec& spec, const JobInput& in);

  // The transition of a job whose record is `current`. A terminal job takes
  // every event as a no-op. Approve and Deny of a job not awaiting approval
  // are INVALID_REQUEST (the client asked); any other event a state cannot
  // take (a Result for a queued job, a Start for a running one) is INTERNAL:
  // a caller's mistake or a worker's lie, never a new state. Taken by value:
  // a caller that is done with its record moves it in.
  static common::StatusOr<JobTransition> Apply(JobRecord current, const JobInput& in);
};

}  // namespace kiln::broker
