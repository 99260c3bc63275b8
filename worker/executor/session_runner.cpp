#include "worker/executor/session_runner.hpp"

#include <poll.h>
#include <unistd.h>

#include <array>
#include <mutex>
#include <optional>

#include "common/clock.hpp"
#include "common/log/logging.hpp"
#include "common/protocol/session_key.hpp"
#include "worker/executor/output_pump.hpp"

namespace kiln::worker {

using common::protocol::SessionIdOf;
namespace {

const common::SubsystemLog kLog("sessions");

constexpr auto kCpuCheck = std::chrono::milliseconds(50);
// A session driver lives across many executions: the per-process cpu rlimit
// must not add them up (cpu_ms is enforced per execution from the cgroup).
constexpr uint64_t kDriverCpuRlimitMs = 7ull * 24 * 3600 * 1000;

// Why an execution stopped early, before its frame arrived.
enum class Stop { kNone, kTimeout, kCancel, kFlood };

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

}  // namespace

SessionRun RunSessionExecution(const protocol::Execute& job, SessionSandbox& s,
                               const runtimes::Runtime& runtime, const RunOptions& options,
                               int cancel_fd, std::chrono::milliseconds interrupt_grace) {
  const auto start = common::SteadyClock::now();
  SessionRun run;
  auto fail = [&](const common::Status& st, bool destroy) {
    run.result = ErrorResult(job, st);
    run.destroy = destroy;
    return run;
  };
  WarmSandbox& sb = s.sandbox;
  auto frame = runtime.EncodeExecution(job.code, job.input_json, job.env);
  if (!frame.ok()) return fail(frame.status(), false);

  // Nothing of a session runs between its executions: it was frozen after
  // the last one (whatever its code left running, or a control frame the
  // code forged to end early); from here on its CPU is this execution's.
  if (auto st = sb.process->Freeze(false); !FreezeOk(st, "thaw")) {
    return fail(st.WithContext("thawing the session"), true);
  }

  sandbox::SandboxLimits limits;
  limits.memory_bytes = std::min(job.limits.memory_mb, options.max_memory_mb) << 20;
  limits.max_pids = static_cast<uint32_t>(std::max<uint64_t>(job.limits.max_pids, 1));
  limits.cpu_ms = kDriverCpuRlimitMs;
  if (auto st = sb.process->SetLimits(limits); !st.ok()) return fail(st, true);
  if (!job.files.empty()) {
    if (auto st = sb.process->AddFiles(job.files); !st.ok()) {
      return fail(st.WithContext("writing input files"), false);
    }
  }
  const double cpu_start = sb.process->Usage().cpu_ms;
  const double cpu_budget =
      static_cast<double>(job.limits.cpu_ms ? job.limits.cpu_ms : job.limits.timeout_ms);
  const uint64_t timeout_ms =
      std::min(job.limits.timeout_ms ? job.limits.timeout_ms : options.max_timeout_ms,
               options.max_timeout_ms);
  const auto deadline = start + std::chrono::milliseconds(timeout_ms);
  auto policy = PolicyFor(job);
  if (!policy.ok()) return fail(policy.status().WithContext("secrets"), false);

  protocol::Result& result = run.result;
  result.job_id = job.job_id;
  OutputPump pump(job, options, *policy);
  size_t frame_off = 0;
  bool out_open = true, err_open = true, exited = false;
  Stop stop = Stop::kNone;
  std::optional<common::SteadyClock::time_point> kill_at;  // after an interrupt
  bool killed = false;
  std::optional<common::StatusOr<runtimes::Runtime::Outcome>> outcome;
  auto next_cpu_check = start + kCpuCheck;
  std::array<char, kReadSize> buf;

  auto interrupt = [&](Stop why) {
    stop = why;
    sb.process->Interrupt();
    kill_at = common::SteadyClock::now() + interrupt_grace;
  };
  auto kill = [&] {
    killed = true;
    sb.process->Kill();
  };

  while (!outcome && !exited) {
    auto now = common::SteadyClock::now();
    if (stop == Stop::kNone && now >= deadline) interrupt(Stop::kTimeout);
    if (stop == Stop::kNone && now >= next_cpu_check) {
      next_cpu_check = now + kCpuCheck;
      if (sb.process->Usage().cpu_ms - cpu_start > cpu_budget) interrupt(Stop::kTimeout);
    }
    if (kill_at && now >= *kill_at && !killed) kill();
    if (pump.flooded() && !killed) {
      stop = Stop::kFlood;
      kill();
    }
    std::vector<pollfd> fds;
    auto add = [&](int fd, short events) { fds.push_back(pollfd{fd, events, 0}); };
    if (frame_off < frame->size()) add(sb.stdin_w.get(), POLLOUT);
    if (out_open) add(sb.stdout_r.get(), POLLIN);
    if (err_open) add(sb.stderr_r.get(), POLLIN);
    add(sb.control_r.get(), POLLIN);
    add(sb.process->exit_fd(), POLLIN);
    if (cancel_fd >= 0 && stop == Stop::kNone) add(cancel_fd, POLLIN);
    auto until = stop == Stop::kNone ? std::min(deadline, next_cpu_check)
                                     : now + std::chrono::milliseconds(20);
    // Buffered output leaves within kChunkFlushInterval even if the execution goes quiet.
    if (auto flush = pump.NextFlush()) until = std::min(until, *flush);
    int wait_ms = static_cast<int>(std::max<int64_t>(
        1, std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count() + 1));
    int n = ::poll(fds.data(), fds.size(), wait_ms);
    if (n < 0 && errno != EINTR) {
      kill();
      return fail(common::ErrnoStatus("poll", errno), true);
    }
    for (const auto& p : fds) {
      if (p.revents == 0) continue;
      if (p.fd == sb.stdin_w.get()) {
        ssize_t w = ::write(p.fd, frame->data() + frame_off, frame->size() - frame_off);
        if (w > 0) frame_off += static_cast<size_t>(w);
        if (w < 0 && errno != EAGAIN && errno != EINTR) frame_off = frame->size();  // driver gone
      } else if (p.fd == sb.stdout_r.get()) {
        out_open = pump.ReadOutput(p.fd, protocol::Stream::kStdout, &result.stdout_data);
      } else if (p.fd == sb.stderr_r.get()) {
        err_open = pump.ReadOutput(p.fd, protocol::Stream::kStderr, &result.stderr_data);
      } else if (p.fd == sb.control_r.get()) {
        for (int reads = 0; reads < kMaxReadsPerWake && !outcome; ++reads) {
          ssize_t r = ::read(p.fd, buf.data(), buf.size());
          if (r == 0) {
            exited = true;  // the driver closed its control pipe: it is gone
            break;
          }
          if (r < 0) break;
          s.control.Feed(std::string_view(buf.data(), static_cast<size_t>(r)));
          outcome = s.control.Next();
        }
        if (!outcome) outcome = s.control.Next();
      } else if (p.fd == sb.process->exit_fd()) {
        exited = true;
      } else if (p.fd == cancel_fd) {
        interrupt(Stop::kCancel);
      }
    }
    pump.FlushDue(common::SteadyClock::now());
  }
  // Everything the execution printed before its frame is in the pipes now.
  auto drain = [&](int fd, protocol::Stream stream, std::string* dest, bool* open) {
    while (*open) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0) break;
      *open = pump.ReadOutput(fd, stream, dest);
    }
    // The filter holds back a possible secret's prefix at the end: the
    // execution's output ends here, so release it (masked).
    if (*open) pump.FinishOpen(stream, dest);
  };
  drain(sb.stdout_r.get(), protocol::Stream::kStdout, &result.stdout_data, &out_open);
  drain(sb.stderr_r.get(), protocol::Stream::kStderr, &result.stderr_data, &err_open);
  pump.FlushAll();  // every streamed byte leaves before the Result
  result.duration_ms = common::MsSince(start);

  const bool frame_ok = outcome && outcome->ok() && (*outcome)->has_frame;
  if (!frame_ok || killed || exited) run.destroy = true;

  const sandbox::ExitStatus usage = sb.process->Usage();
  result.cpu_ms = std::max(0.0, usage.cpu_ms - cpu_start);
  result.max_rss_kb = usage.max_rss_kb;
  result.truncated = pump.truncated();
  uint32_t redactions = pump.redactions();
  if (outcome && !outcome->ok()) {
    // A malformed frame: the driver (or code writing to its fd) broke the
    // channel; the session cannot be trusted any more.
    kill();
    run.destroy = true;
  }
  if (run.destroy && !killed) kill();
  if (run.destroy) {
    auto exit = sb.process->Wait();
    if (exit.ok()) {
      result.exit_code = exit->exit_code;
      result.signal = exit->signal;
      if (exit->oom_killed && stop == Stop::kNone)
        result.reason = protocol::EndReason::kMemoryExceeded;
      if (exit->seccomp_killed && stop == Stop::kNone) {
        result.reason = protocol::EndReason::kSandboxViolation;
        result.worker_error = exit->violation;
      }
    }
  }
  if (frame_ok) {
    auto& o = **outcome;
    result.exit_code = o.exit_code;
    result.signal.reset();
    result.result_json = (*policy)->Mask(o.result_json, &redactions);
    if (o.error) {
      o.error->message = (*policy)->Mask(o.error->message, &redactions);
      o.error->traceback = (*policy)->Mask(o.error->traceback, &redactions);
      result.error = std::move(o.error);
    }
  } else if (outcome && !outcome->ok() && stop == Stop::kNone) {
    result.error = protocol::ErrorInfo{"KilnControlError", outcome->status().message(), ""};
  }
  result.redactions = redactions;
  switch (stop) {
    case Stop::kTimeout:
      result.reason = protocol::EndReason::kTimeout;
      break;
    case Stop::kCancel:
      result.reason = protocol::EndReason::kCancelled;
      break;
    case Stop::kFlood:
      result.reason = protocol::EndReason::kOutputLimit;
      break;
    case Stop::kNone:
      break;  // kExit, or what the wait status said above
  }
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
  return FreezeOk(s.sandbox.process->Freeze(true), "freeze");
}

}  // namespace kiln::worker
