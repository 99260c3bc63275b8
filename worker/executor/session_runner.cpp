#include "worker/executor/session_runner.hpp"

#include <algorithm>
#include <mutex>
#include <utility>

#include "common/clock.hpp"
#include "common/log/logging.hpp"
#include "common/protocol/session_key.hpp"
#include "worker/executor/execution_driver.hpp"
#include "worker/executor/output_pump.hpp"
#include "worker/executor/warm_pool.hpp"

namespace kiln::worker {

using common::protocol::SessionIdOf;
namespace {

const common::SubsystemLog kLog("sessions");

// Freeze/thaw of a session between executions. UNAVAILABLE (no cgroups, or
// a v1 host without a freezer hierarchy) is said once and lived with; any
// other failure ends the session.
bool FreezeOk(const common::Status& st, const char* what) {
  if (st.ok()) return true;
  if (st.code() == common::Code::kUnavailable) {
    static std::once_flag once;
    std::call_once(once, [&] {
      kLog.Warn({}, "sessions keep running between executions on this host: {}", st.ToString());
    });
    return true;
  }
  kLog.Warn({}, "cannot {} a session: {}", what, st.ToString());
  return false;
}

// A session execution ends with the driver's frame (its pipes stay open for
// the next one). A stop interrupts the running code first, so the session
// survives if the driver answers within `interrupt_grace`; the driver's exit
// ends the execution at once.
DriverSpec SessionSpec(SessionSandbox& s, std::chrono::milliseconds interrupt_grace) {
  DriverSpec spec;
  spec.machine = SessionPolicy(interrupt_grace);
  spec.cpu_rlimit_ms = kSessionCpuRlimitMs;
  spec.cpu_from_start = true;
  spec.frames = &s.control;
  return spec;
}

}  // namespace

SessionRun RunSessionExecution(const protocol::Execute& job, SessionSandbox& s,
                               const runtimes::Runtime& runtime, const RunOptions& options,
                               int cancel_fd, std::chrono::milliseconds interrupt_grace) {
  SessionRun run;
  auto fail = [&](const common::Status& st, bool destroy) {
    run.result = ErrorResult(job, st);
    run.destroy = destroy;
    return run;
  };
  WarmSandbox& sb = s.sandbox;
  auto frame = runtime.EncodeExecution(job.code, job.input_json, job.env, job.stdin_data);
  if (!frame.ok()) return fail(frame.status(), false);
  DriverSpec spec = SessionSpec(s, interrupt_grace);
  // Nothing of a session runs between its executions uncounted: it was
  // stopped after the last one (whatever its code left running, or a control
  // frame the code forged to end early), and from here on its CPU is this
  // execution's; resumed once its frame is in the pipe, where it can be. Or
  // the last one ended moments ago and it was left running (awake,
  // SessionTable::Rest): then no resume, and what ran since that end counts
  // to this execution too.
  // An execution that fails before its code runs leaves cpu_at_end_ms as
  // it was: the next one counts on from there.
  const bool awake = std::exchange(s.awake, false);
  if (awake) spec.cpu_start_ms = s.cpu_at_end_ms;
  auto thaw = [&s]() -> common::Status {
    common::Status st = s.sandbox.process->Freeze(false);
    if (!FreezeOk(st, "thaw")) return st.WithContext("thawing the session");
    s.stopped = false;
    return common::Status::Ok();
  };
  const bool thaw_first = !awake && !sb.process->LimitsWhileFrozen();
  if (!awake && !thaw_first) spec.resume = thaw;
  ExecutionDriver driver(job, sb, options, std::move(spec));
  if (thaw_first) {
    if (auto st = thaw(); !st.ok()) return fail(st, true);
  }

  if (auto st = driver.Run(*std::move(frame), cancel_fd); !st.ok()) {
    return fail(st, driver.sandbox_lost());
  }
  const ExecutionMachine& machine = driver.machine();
  const StopReason stop = machine.stop();
  auto& outcome = driver.frame();
  run.result = std::move(driver.result());
  protocol::Result& result = run.result;

  const bool frame_ok = outcome && outcome->ok() && (*outcome)->has_frame;
  if (!frame_ok || machine.killed() || machine.exited()) run.destroy = true;

  const sandbox::ExitStatus usage = sb.process->Usage();
  result.cpu_ms = std::max(0.0, usage.cpu_ms - driver.cpu_start_ms());
  s.cpu_at_end_ms = usage.cpu_ms;  // a session left running counts on from here
  result.max_rss_kb = usage.max_rss_kb;
  // A malformed frame: the driver (or code writing to its fd) broke the
  // channel; the session cannot be trusted any more.
  if (outcome && !outcome->ok()) run.destroy = true;
  if (run.destroy) {
    if (!machine.killed()) sb.process->Kill();
    auto exit = sb.process->Wait();
    if (exit.ok()) {
      result.exit_code = exit->exit_code;
      result.signal = exit->signal;
      if (exit->oom_killed && stop == StopReason::kNone)
        result.reason = protocol::EndReason::kMemoryExceeded;
      if (exit->seccomp_killed && stop == StopReason::kNone) {
        result.reason = protocol::EndReason::kSandboxViolation;
        result.worker_error = exit->violation;
      }
    }
  }
  if (frame_ok) {
    auto& o = **outcome;
    result.exit_code = o.exit_code;
    result.signal.reset();
    MaskOutcome(job, driver.policy(), &o, &result.redactions);
    result.result_json = std::move(o.result_json);
    result.error = std::move(o.error);
    result.outputs = std::move(o.outputs);
    result.outputs_truncated = o.outputs_truncated;
  } else if (outcome && !outcome->ok() && stop == StopReason::kNone) {
    result.error = protocol::ErrorInfo{"KilnControlError", outcome->status().message(), ""};
  }
  // Else kExit, or what the wait status said above.
  if (auto stopped = StopEndReason(stop)) result.reason = *stopped;
  if (!job.collect.empty()) {
    if (run.destroy) {
      result.files_truncated = true;  // the sandbox goes: nothing was collected
    } else {
      ApplyCollected(sb.process->CollectFiles(job.collect, options.max_collect_bytes), job,
                     &result);
    }
  }
  kLog.Debug({.job = job.job_id, .session = SessionIdOf(s.id), .tenant = job.tenant},
             "execution done: {:.2f} ms{}", result.duration_ms,
             run.destroy ? " (sandbox destroyed)" : "");
  FitToWire(&result);
  return run;
}

bool FreezeBetweenExecutions(SessionSandbox& s) {
  common::Status st = s.sandbox.process->Freeze(true);
  if (st.ok()) s.stopped = true;
  return FreezeOk(st, "freeze");
}

}  // namespace kiln::worker
