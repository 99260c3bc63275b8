#include "broker/job/lifecycle.hpp"

#include <cctype>
#include <string>
#include <utility>

#include "common/rich_output.hpp"

namespace kiln::broker {
namespace {

using common::Code;
using common::Status;
namespace protocol = common::protocol;

uint32_t Actions(JobAction a) { return static_cast<uint32_t>(a); }
uint32_t Actions(JobAction a, JobAction b) { return Actions(a) | Actions(b); }

JobError ErrorOf(Code code, std::string message) {
  return JobError{std::string(common::CodeName(code)), std::move(message),
                  common::IsRetryable(code), "", ""};
}

// `r` ends now with `status` and an error of `code`.
void End(JobRecord* r, JobStatus status, Code code, std::string message, int64_t now_ms) {
  r->status = status;
  r->error = ErrorOf(code, std::move(message));
  r->queue_position.reset();
  r->wait_reason.clear();
  r->finished_ms = now_ms;
}

// ": <call>" for a violation's message. The worker is not trusted with the
// tenant's error text: only a short call name or the foreign-ABI phrase
// (letters, digits, spaces and "_(),") passes; anything else is dropped.
std::string ViolationDetail(const std::string& call) {
  constexpr size_t kMaxDetail = 96;
  if (call.empty() || call.size() > kMaxDetail) return "";
  for (char c : call) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == ' ' || c == '(' || c == ')' || c == ',';
    if (!ok) return "";
  }
  return ": " + call;
}

// The worker's word on which network cap the job broke, if it reads as one
// of the gateway's own messages (a hostile worker's text is not passed on).
std::string NetworkLimitDetail(const std::string& text) {
  if (text.size() > 200 || !(text.starts_with("bytes:") || text.starts_with("connections:"))) {
    return "";
  }
  for (char c : text) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == ' ' || c == ':' || c == ',' ||
          c == '(' || c == ')' || c == '.')) {
      return "";
    }
  }
  return " (" + text + ")";
}

// A running job's record once its worker's Result came.
void ApplyResult(const protocol::Result& res, int64_t now_ms, JobRecord* r) {
  r->finished_ms = now_ms;
  r->exit_code = res.exit_code;
  r->signal = res.signal;
  r->stdout_data = res.stdout_data;
  r->stderr_data = res.stderr_data;
  r->truncated = res.truncated;
  r->result_json = res.result_json;
  r->duration_ms = res.duration_ms;
  r->cpu_ms = res.cpu_ms;
  r->max_rss_kb = res.max_rss_kb;
  r->files = res.files;
  r->files_truncated = res.files_truncated;
  r->files_omitted = res.files_omitted;
  // The worker bounds and checks its outputs; a hostile one may not have:
  // only valid mime types within the count and byte bounds are kept.
  r->outputs = res.outputs;
  r->outputs_truncated = common::BoundRichOutputs(&r->outputs) || res.outputs_truncated;
  r->redactions = res.redactions;
  // Checked like everything a worker sends: a malformed account is dropped.
  r->network.reset();
  if (!res.network_json.empty()) {
    if (auto usage = common::NetworkUsage::FromJson(res.network_json); usage.ok()) {
      r->network = *std::move(usage);
    }
  }
  r->end_reason = protocol::EndReasonName(res.reason);
  r->queue_position.reset();
  r->wait_reason.clear();
  auto fail = [&](JobStatus s, Code code, std::string message) {
    r->status = s;
    r->error = ErrorOf(code, std::move(message));
  };
  switch (res.reason) {
    case protocol::EndReason::kExit:
      if (res.exit_code && *res.exit_code == 0 && !res.error) {
        r->status = JobStatus::kSucceeded;
      } else {
        // Raised, a signal, a non-zero exit; or exit 0 with an error (a
        // `result` the runtime could not encode, ResultNotSerializable).
        r->status = JobStatus::kFailed;
        if (res.error) {
          r->error = JobError{"EXECUTION_FAILED", res.error->message, false, res.error->type,
                              res.error->traceback};
        } else if (res.signal) {
          r->error = JobError{"EXECUTION_FAILED",
                              "the program was killed by signal " + std::to_string(*res.signal),
                              false, "", ""};
        } else {
          r->error =
              JobError{"EXECUTION_FAILED",
                       "the program exited with code " + std::to_string(res.exit_code.value_or(-1)),
                       false, "", ""};
        }
      }
      break;
    case protocol::EndReason::kTimeout:
      fail(JobStatus::kTimedOut, Code::kTimeout,
           "execution exceeded its time limit (" + std::to_string(res.duration_ms) + " ms)");
      break;
    case protocol::EndReason::kMemoryExceeded:
      fail(JobStatus::kMemoryExceeded, Code::kMemoryExceeded,
           "execution exceeded its memory limit");
      break;
    case protocol::EndReason::kOutputLimit:
      fail(JobStatus::kFailed, Code::kOutputLimit, "execution exceeded its output limit");
      break;
    case protocol::EndReason::kNetworkLimit:
      fail(JobStatus::kFailed, Code::kNetworkLimit,
           "execution exceeded its network limit" + NetworkLimitDetail(res.worker_error));
      break;
    case protocol::EndReason::kCancelled:
      fail(JobStatus::kCancelled, Code::kCancelled, "execution was cancelled");
      break;
    case protocol::EndReason::kSandboxViolation:
      fail(JobStatus::kFailed, Code::kSecurityBlocked,
           "the sandbox killed the program for a forbidden system call" +
               ViolationDetail(res.worker_error));
      break;
    case protocol::EndReason::kRefused:  // requeued by the dispatcher; here only if misused
    case protocol::EndReason::kError:
      // The worker is not trusted to pick any code: only a fault in the
      // job's own input (a file path its code made a FIFO, files too large
      // for the workspace) is passed on; everything else is INTERNAL.
      // A job's `packages` failing to install is also its own input's fault;
      // a worker that cannot give the job the network it asked for says so.
      fail(JobStatus::kError,
           res.worker_error_code == common::CodeName(Code::kInvalidRequest)  ? Code::kInvalidRequest
           : res.worker_error_code == common::CodeName(Code::kLimitExceeded) ? Code::kLimitExceeded
           : res.worker_error_code == common::CodeName(Code::kPackageInstallFailed)
               ? Code::kPackageInstallFailed
           : res.worker_error_code == common::CodeName(Code::kNetworkNotAllowed)
               ? Code::kNetworkNotAllowed
               : Code::kInternal,
           "the worker could not run the job: " + res.worker_error);
      break;
  }
}

void SetEpoch(JobRecord* r, const std::optional<SessionEpoch>& e) {
  r->session_epoch.reset();
  r->session_incarnation = 0;
  if (!e) return;
  r->session_epoch = e->generation;
  r->session_incarnation = e->incarnation;
}

Status Misuse(const JobRecord& r, JobEvent e) {
  return Status(Code::kInternal, std::string("event ") + JobEventName(e) +
                                     " does not apply to execution " + r.id + " (it is " +
                                     JobStatusName(r.status) + ")");
}

Status NotAwaiting(const JobRecord& r) {
  return common::InvalidRequest("execution " + r.id + " is not awaiting approval (it is " +
                                JobStatusName(r.status) + ")");
}

common::StatusOr<JobTransition> FromQueued(JobTransition t, const JobInput& in) {
  JobRecord& r = t.record;
  switch (in.event) {
    case JobEvent::kStart:
      r.status = JobStatus::kRunning;
      r.worker = in.worker;
      SetEpoch(&r, in.session_epoch);
      r.queue_position.reset();
      r.wait_reason.clear();
      r.started_ms = in.now_ms;
      r.queued_ms = static_cast<double>(in.now_ms - r.created_ms);
      t.actions = Actions(JobAction::kSendToWorker);
      return t;
    case JobEvent::kCancel:
      End(&r, JobStatus::kCancelled, Code::kCancelled, "cancelled before it started", in.now_ms);
      t.actions = Actions(JobAction::kStoreEnd, JobAction::kTellWorker);
      return t;
    case JobEvent::kSessionDeleted:
      End(&r, JobStatus::kCancelled, Code::kCancelled, "its session was deleted", in.now_ms);
      t.actions = Actions(JobAction::kStoreEnd, JobAction::kTellWorker);
      return t;
    case JobEvent::kSessionLost:
      End(&r, JobStatus::kError, Code::kSessionLost, in.detail, in.now_ms);
      if (!in.worker.empty()) r.worker = in.worker;
      if (in.session_epoch) SetEpoch(&r, in.session_epoch);
      t.actions = Actions(JobAction::kStoreEnd);
      return t;
    case JobEvent::kApprove:
    case JobEvent::kDeny:
      return NotAwaiting(r);
    case JobEvent::kApprovalExpired:  // approved meanwhile
      return t;
    default:
      return Misuse(r, in.event);
  }
}

common::StatusOr<JobTransition> FromAwaitingApproval(JobTransition t, const JobInput& in) {
  JobRecord& r = t.record;
  switch (in.event) {
    case JobEvent::kApprove:
      r.status = JobStatus::kQueued;
      t.actions = Actions(JobAction::kSchedule);
      return t;
    case JobEvent::kDeny:
      End(&r, JobStatus::kRejected, Code::kApprovalDenied, "denied by " + in.detail, in.now_ms);
      t.actions = Actions(JobAction::kStoreEnd);
      return t;
    case JobEvent::kApprovalExpired:
      End(&r, JobStatus::kRejected, Code::kApprovalExpired,
          "no admin approved it within the approval window", in.now_ms);
      t.actions = Actions(JobAction::kStoreEnd);
      return t;
    case JobEvent::kCancel:
      // Approval may come between the read and the store: then it is queued
      // or running, and the cancel must reach it there.
      End(&r, JobStatus::kCancelled, Code::kCancelled, "cancelled before it was approved",
          in.now_ms);
      t.actions = Actions(JobAction::kStoreEnd, JobAction::kTellWorker);
      return t;
    case JobEvent::kSessionDeleted:
      End(&r, JobStatus::kCancelled, Code::kCancelled, "its session was deleted before approval",
          in.now_ms);
      t.actions = Actions(JobAction::kStoreEnd, JobAction::kTellWorker);
      return t;
    case JobEvent::kSessionLost:
      End(&r, JobStatus::kError, Code::kSessionLost, in.detail, in.now_ms);
      t.actions = Actions(JobAction::kStoreEnd);
      return t;
    default:
      return Misuse(r, in.event);
  }
}

common::StatusOr<JobTransition> FromRunning(JobTransition t, const JobInput& in) {
  JobRecord& r = t.record;
  switch (in.event) {
    case JobEvent::kResult:
      if (in.result == nullptr) return Misuse(r, in.event);
      ApplyResult(*in.result, in.now_ms, &r);
      t.actions = Actions(JobAction::kStoreEnd);
      return t;
    case JobEvent::kRefused:
      // It never ran: back to its place in the queue (the requeue script).
      r.status = JobStatus::kQueued;
      r.worker.clear();
      r.started_ms = 0;
      r.queued_ms.reset();
      t.actions = Actions(JobAction::kSchedule);
      return t;
    case JobEvent::kCancel:
    case JobEvent::kSessionDeleted:
      // Its worker kills it; the Result (reason cancelled) ends it, with the
      // output it made so far.
      t.actions = Actions(JobAction::kTellWorker);
      return t;
    case JobEvent::kWorkerLost:
      End(&r, JobStatus::kError, Code::kWorkerLost,
          in.detail + "; the job may have partly run and is not retried", in.now_ms);
      t.actions = Actions(JobAction::kStoreEnd);
      return t;
    case JobEvent::kOverdue:
      End(&r, JobStatus::kError, Code::kInternal, "the worker sent no result for this job",
          in.now_ms);
      r.error->retryable = true;  // the worker's fault, not the job's: another may run it
      t.actions = Actions(JobAction::kStoreEnd, JobAction::kTellWorker);
      return t;
    case JobEvent::kApprove:
    case JobEvent::kDeny:
      return NotAwaiting(r);
    case JobEvent::kApprovalExpired:  // approved meanwhile
      return t;
    default:
      return Misuse(r, in.event);
  }
}

}  // namespace

const char* JobEventName(JobEvent e) {
  switch (e) {
    case JobEvent::kSubmit:
      return "submit";
    case JobEvent::kRefuse:
      return "refuse";
    case JobEvent::kApprove:
      return "approve";
    case JobEvent::kDeny:
      return "deny";
    case JobEvent::kApprovalExpired:
      return "approval_expired";
    case JobEvent::kStart:
      return "start";
    case JobEvent::kResult:
      return "result";
    case JobEvent::kRefused:
      return "refused";
    case JobEvent::kCancel:
      return "cancel";
    case JobEvent::kSessionDeleted:
      return "session_deleted";
    case JobEvent::kSessionLost:
      return "session_lost";
    case JobEvent::kWorkerLost:
      return "worker_lost";
    case JobEvent::kOverdue:
      return "overdue";
  }
  return "?";
}

common::StatusOr<JobTransition> JobLifecycle::Begin(const JobSpec& spec, const JobInput& in) {
  JobTransition t;
  t.record = JobRecord::Queued(spec);
  t.from = JobStatus::kQueued;
  switch (in.event) {
    case JobEvent::kSubmit:
      t.actions = Actions(JobAction::kSchedule);
      return t;
    case JobEvent::kRefuse:
      End(&t.record, JobStatus::kRejected, in.code, in.detail, in.now_ms);
      t.actions = Actions(JobAction::kStoreEnd);
      return t;
    default:
      return Status(Code::kInternal, std::string("event ") + JobEventName(in.event) +
                                         " cannot begin execution " + spec.id);
  }
}

common::StatusOr<JobTransition> JobLifecycle::Apply(JobRecord current, const JobInput& in) {
  if (in.event == JobEvent::kSubmit || in.event == JobEvent::kRefuse) {
    return Misuse(current, in.event);
  }
  JobTransition t;
  t.from = current.status;
  // Terminal: nothing changes it any more. Approve and Deny still tell the
  // admin why nothing happened; a Start of an ended job is a scheduler bug.
  if (IsTerminal(current.status)) {
    if (in.event == JobEvent::kApprove || in.event == JobEvent::kDeny) return NotAwaiting(current);
    if (in.event == JobEvent::kStart) return Misuse(current, in.event);
  }
  t.record = std::move(current);
  switch (t.from) {
    case JobStatus::kQueued:
      return FromQueued(std::move(t), in);
    case JobStatus::kAwaitingApproval:
      return FromAwaitingApproval(std::move(t), in);
    case JobStatus::kRunning:
      return FromRunning(std::move(t), in);
    default:
      return t;
  }
}

}  // namespace kiln::broker
