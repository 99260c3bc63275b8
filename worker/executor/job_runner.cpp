#include "worker/executor/job_runner.hpp"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>

#include "common/clock.hpp"
#include "common/log/logging.hpp"
#include "worker/executor/output_pump.hpp"

namespace kiln::worker {
namespace {

const common::SubsystemLog kLog("jobs");

// After pid 1 exits, give the pipes this long to reach end-of-file.
constexpr auto kDrainGrace = std::chrono::milliseconds(500);
// How often a running job's cpu time is compared with its budget.
constexpr auto kCpuCheck = std::chrono::milliseconds(50);

}  // namespace

protocol::Result RunJob(const protocol::Execute& job, WarmSandbox& sb,
                        const runtimes::Runtime& runtime, const RunOptions& options,
                        int cancel_fd) {
  const auto start = common::SteadyClock::now();
  auto frame = runtime.EncodeJob(job.code, job.input_json, job.env);
  if (!frame.ok()) return ErrorResult(job, frame.status());

  sandbox::SandboxLimits limits;
  limits.memory_bytes = std::min(job.limits.memory_mb, options.max_memory_mb) << 20;
  limits.max_pids = static_cast<uint32_t>(std::max<uint64_t>(job.limits.max_pids, 1));
  limits.cpu_ms = job.limits.cpu_ms ? job.limits.cpu_ms : job.limits.timeout_ms;
  if (auto st = sb.process->SetLimits(limits); !st.ok()) return ErrorResult(job, st);
  if (!job.files.empty()) {
    if (auto st = sb.process->AddFiles(job.files); !st.ok()) {
      // A bad path is the client's fault; say so plainly.
      return ErrorResult(job, st.WithContext("writing input files"));
    }
  }

  const double setup_ms = common::MsSince(start);
  const uint64_t timeout_ms =
      std::min(job.limits.timeout_ms ? job.limits.timeout_ms : options.max_timeout_ms,
               options.max_timeout_ms);
  const auto deadline = common::SteadyClock::now() + std::chrono::milliseconds(timeout_ms);
  protocol::Result result;
  result.job_id = job.job_id;
  auto policy = PolicyFor(job);
  if (!policy.ok()) return ErrorResult(job, policy.status().WithContext("secrets"));
  OutputPump pump(job, options, *policy);
  std::string control;
  size_t frame_off = 0;
  bool out_open = true, err_open = true, ctl_open = true, exited = false;
  bool timed_out = false, cancelled = false, flooded = false;
  double exit_seen_ms = 0;
  std::optional<common::SteadyClock::time_point> drain_until;

  // The job is complete when pid 1 has exited and the pipes are drained, or
  // earlier: when the wrapper has written its control frame and every pipe
  // is at EOF (no process of the job holds stdout or stderr any more). Then
  // the interpreter's shutdown and the kernel's namespace teardown stay off
  // the job's latency: the sandbox is killed and reaped after the Result.
  bool early = false;
  // RLIMIT_CPU is per process (each child starts afresh) and pid 1 ignores
  // SIGXCPU: the job's cpu_ms is enforced on the whole sandbox from its
  // cgroup's cpu time, checked every kCpuCheck.
  const double cpu_budget_ms = static_cast<double>(limits.cpu_ms);
  auto next_cpu_check = common::SteadyClock::now() + kCpuCheck;
  while (true) {
    if (!exited && !timed_out && !cancelled && !flooded &&
        common::SteadyClock::now() >= next_cpu_check) {
      next_cpu_check = common::SteadyClock::now() + kCpuCheck;
      if (sb.process->Usage().cpu_ms > cpu_budget_ms) {
        timed_out = true;
        sb.process->Kill();
      }
    }
    if (!out_open && !err_open && !ctl_open) {
      if (exited) break;
      if (!control.empty() && !timed_out && !cancelled && !flooded) {
        early = true;
        break;
      }
    }
    auto now = common::SteadyClock::now();
    if (drain_until && now >= *drain_until) break;
    if (!exited && !timed_out && !cancelled && !flooded && now >= deadline) {
      timed_out = true;
      sb.process->Kill();
    }
    std::vector<pollfd> fds;
    auto add = [&](int fd, short events) { fds.push_back(pollfd{fd, events, 0}); };
    if (sb.stdin_w.valid()) add(sb.stdin_w.get(), POLLOUT);
    if (out_open) add(sb.stdout_r.get(), POLLIN);
    if (err_open) add(sb.stderr_r.get(), POLLIN);
    if (ctl_open) add(sb.control_r.get(), POLLIN);
    if (!exited) add(sb.process->exit_fd(), POLLIN);
    if (cancel_fd >= 0 && !cancelled) add(cancel_fd, POLLIN);
    auto until = drain_until ? *drain_until : std::min(deadline, next_cpu_check);
    if (timed_out || cancelled || flooded) until = now + std::chrono::milliseconds(100);
    // Buffered output leaves within kChunkFlushInterval even if the job goes quiet.
    if (auto flush = pump.NextFlush()) until = std::min(until, *flush);
    int wait_ms = static_cast<int>(std::max<int64_t>(
        1, std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count() + 1));
    int n = ::poll(fds.data(), fds.size(), wait_ms);
    if (n < 0 && errno != EINTR) {
      sb.process->Kill();
      return ErrorResult(job, common::ErrnoStatus("poll", errno));
    }
    for (const auto& p : fds) {
      if (p.revents == 0) continue;
      if (p.fd == sb.stdin_w.get()) {
        while (frame_off < frame->size()) {
          ssize_t w = ::write(p.fd, frame->data() + frame_off, frame->size() - frame_off);
          if (w <= 0) {
            if (w < 0 && errno == EAGAIN) break;
            frame_off = frame->size();  // the wrapper is gone: its exit tells why
            break;
          }
          frame_off += static_cast<size_t>(w);
        }
        if (frame_off >= frame->size()) sb.stdin_w.Reset();  // EOF: the wrapper starts the job
      } else if (p.fd == sb.stdout_r.get()) {
        out_open = pump.ReadOutput(p.fd, protocol::Stream::kStdout, &result.stdout_data);
      } else if (p.fd == sb.stderr_r.get()) {
        err_open = pump.ReadOutput(p.fd, protocol::Stream::kStderr, &result.stderr_data);
      } else if (p.fd == sb.control_r.get()) {
        ctl_open = ReadControl(p.fd, &control);
      } else if (p.fd == sb.process->exit_fd()) {
        exited = true;
        exit_seen_ms = common::MsSince(start);
        drain_until = common::SteadyClock::now() + kDrainGrace;
      } else if (p.fd == cancel_fd) {
        cancelled = true;
        sb.process->Kill();
      }
    }
    if (pump.flooded() && !flooded && !exited) {
      flooded = true;
      sb.process->Kill();
    }
    pump.FlushDue(common::SteadyClock::now());
  }
  result.duration_ms = common::MsSince(start);
  sb.stdin_w.Reset();
  if (out_open) pump.FinishOpen(protocol::Stream::kStdout, &result.stdout_data);
  if (err_open) pump.FinishOpen(protocol::Stream::kStderr, &result.stderr_data);
  pump.FlushAll();  // every streamed byte leaves before the Result
  kLog.Debug({.job = job.job_id, .tenant = job.tenant},
             "job done: setup {:.2f} ms, exit seen {:.2f} ms, done {:.2f} ms{}", setup_ms,
             exit_seen_ms, result.duration_ms, early ? " (before exit)" : "");

  auto outcome = runtime.ParseControl(control);
  // `result` and error texts leave the worker too: mask them as well.
  uint32_t redactions = pump.redactions();
  if (outcome.ok()) {
    outcome->result_json = (*policy)->Mask(outcome->result_json, &redactions);
    if (outcome->error) {
      outcome->error->message = (*policy)->Mask(outcome->error->message, &redactions);
      outcome->error->traceback = (*policy)->Mask(outcome->error->traceback, &redactions);
    }
  }
  result.redactions = redactions;
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
  result.truncated = pump.truncated();

  if (cancelled) {
    result.reason = protocol::EndReason::kCancelled;
  } else if (timed_out) {
    result.reason = protocol::EndReason::kTimeout;
  } else if (flooded) {
    result.reason = protocol::EndReason::kOutputLimit;
  } else if (exit->oom_killed) {
    result.reason = protocol::EndReason::kMemoryExceeded;
  } else if (exit->seccomp_killed) {
    result.reason = protocol::EndReason::kSandboxViolation;
    result.worker_error = exit->violation;
  } else if (exit->signal && (*exit->signal == SIGXCPU ||
                              (*exit->signal == SIGKILL && exit->cpu_ms >= cpu_budget_ms))) {
    // The per-process cpu rlimit (SIGXCPU, or its hard-limit SIGKILL for pid 1).
    result.reason = protocol::EndReason::kTimeout;
  } else {
    result.reason = protocol::EndReason::kExit;
  }

  if (outcome.ok()) {
    result.result_json = std::move(outcome->result_json);
    result.error = std::move(outcome->error);
  } else if (result.reason == protocol::EndReason::kExit) {
    result.error = protocol::ErrorInfo{"KilnControlError", outcome.status().message(), ""};
  }

  if (!job.collect.empty()) {
    ApplyCollected(sb.process->CollectFiles(job.collect, options.max_collect_bytes), job, &result);
  }
  FitToWire(&result);
  return result;
}

}  // namespace kiln::worker
