#include "worker/executor/job_runner.hpp"

#include <signal.h>

#include "common/clock.hpp"
#include "common/log/logging.hpp"
#include "worker/executor/execution_driver.hpp"
#include "worker/executor/output_pump.hpp"

namespace kiln::worker {
namespace {

const common::SubsystemLog kLog("jobs");

// A one-shot job is killed at once when stopped (its sandbox serves no other
// job). It is complete when pid 1 has exited and the pipes are drained, or
// earlier: when the wrapper has written its control frame and every pipe is
// at EOF (no process of the job holds stdout or stderr any more). Then the
// interpreter's shutdown and the kernel's namespace teardown stay off the
// job's latency: the sandbox is killed and reaped after the Result.
DriverSpec OneShotSpec() {
  DriverSpec spec;
  spec.machine = OneShotPolicy();
  spec.clock_after_setup = true;
  spec.close_stdin = true;
  return spec;
}

}  // namespace

protocol::Result RunJob(const protocol::Execute& job, WarmSandbox& sb,
                        const runtimes::Runtime& runtime, const RunOptions& options,
                        int cancel_fd) {
  ExecutionDriver driver(job, sb, options, OneShotSpec());
  auto frame = runtime.EncodeJob(job.code, job.input_json, job.env, job.stdin_data);
  if (!frame.ok()) return ErrorResult(job, frame.status());
  if (auto st = driver.Run(*std::move(frame), cancel_fd); !st.ok()) return ErrorResult(job, st);
  const ExecutionMachine& machine = driver.machine();
  protocol::Result& result = driver.result();
  bool early = machine.early();
  kLog.Debug({.job = job.job_id, .tenant = job.tenant},
             "job done: setup {:.2f} ms, exit seen {:.2f} ms, done {:.2f} ms{}", driver.setup_ms(),
             driver.exit_seen_ms(), result.duration_ms, early ? " (before exit)" : "");

  auto outcome = runtime.ParseControl(driver.control());
  if (outcome.ok()) MaskOutcome(job, driver.policy(), &*outcome, &result.redactions);
  if (early && !(outcome.ok() && outcome->has_frame && outcome->exit_code)) {
    // Not a frame we can trust for the exit status: wait for the real one.
    early = false;
  }
  common::StatusOr<sandbox::ExitStatus> exit = sandbox::ExitStatus{};
  if (early) {
    exit = sb.process->Usage();
    sb.process->Kill();
    exit->exit_code = outcome->exit_code;
  } else {
    exit = sb.process->Wait();
  }
  if (!exit.ok()) return ErrorResult(job, exit.status().WithContext("reaping the sandbox"));
  result.exit_code = exit->exit_code;
  result.signal = exit->signal;
  result.cpu_ms = exit->cpu_ms;
  result.max_rss_kb = exit->max_rss_kb;

  // A cancel beats a timeout or a flood seen before it (the machine keeps
  // the first of those two).
  if (auto stopped = StopEndReason(machine.stop())) {
    result.reason = *stopped;
  } else if (exit->oom_killed) {
    result.reason = protocol::EndReason::kMemoryExceeded;
  } else if (exit->seccomp_killed) {
    result.reason = protocol::EndReason::kSandboxViolation;
    result.worker_error = exit->violation;
  } else if (exit->signal &&
             (*exit->signal == SIGXCPU ||
              (*exit->signal == SIGKILL && exit->cpu_ms >= driver.cpu_budget_ms()))) {
    // The per-process cpu rlimit (SIGXCPU, or its hard-limit SIGKILL for pid 1).
    result.reason = protocol::EndReason::kTimeout;
  } else {
    result.reason = protocol::EndReason::kExit;
  }

  if (outcome.ok()) {
    result.result_json = std::move(outcome->result_json);
    result.error = std::move(outcome->error);
    result.outputs = std::move(outcome->outputs);
    result.outputs_truncated = outcome->outputs_truncated;
  } else if (result.reason == protocol::EndReason::kExit) {
    result.error = protocol::ErrorInfo{"KilnControlError", outcome.status().message(), ""};
  }

  if (!job.collect.empty()) {
    ApplyCollected(sb.process->CollectFiles(job.collect, options.max_collect_bytes), job, &result);
  }
  FitToWire(&result);
  return std::move(result);
}

}  // namespace kiln::worker
