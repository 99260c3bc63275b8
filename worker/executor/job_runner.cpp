#include "worker/executor/job_runner.hpp"

#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <array>

#include "common/clock.hpp"
#include "common/secrets/secrets_filter.hpp"

namespace kiln::worker {
namespace {

namespace protocol = common::protocol;

constexpr size_t kReadSize = 64 << 10;
constexpr int kMaxReadsPerWake = 16;
// Output kept flowing this far past the cap before the job is killed.
constexpr uint64_t kMinFloodBytes = 8u << 20;
// After pid 1 exits, give the pipes this long to reach end-of-file.
constexpr auto kDrainGrace = std::chrono::milliseconds(500);
// How often a running job's cpu time is compared with its budget.
constexpr auto kCpuCheck = std::chrono::milliseconds(50);

protocol::Result ErrorResult(const protocol::Execute& job, const common::Status& st) {
  protocol::Result r;
  r.job_id = job.job_id;
  r.reason = protocol::EndReason::kError;
  r.worker_error = st.ToString();
  return r;
}

// Reads stdout and stderr, passes every byte through the job's secrets filter
// before it is kept or streamed (nothing leaves the worker unmasked), and
// caps what is kept at max_output_bytes.
class Pump {
 public:
  Pump(const protocol::Execute& job, const RunOptions& options,
       const std::shared_ptr<const common::SecretsPolicy>& policy)
      : job_(job),
        options_(options),
        cap_(std::min(
            job.limits.max_output_bytes ? job.limits.max_output_bytes : options.max_output_bytes,
            options.max_output_bytes)),
        flood_(std::max<uint64_t>(cap_ * 8, kMinFloodBytes)),
        filters_{common::SecretsFilter(policy), common::SecretsFilter(policy)} {}

  // Reads what is available from an output pipe; false at end-of-file.
  bool ReadOutput(int fd, protocol::Stream stream, std::string* dest) {
    std::array<char, kReadSize> buf;
    common::SecretsFilter& filter = Filter(stream);
    // Bounded per call, so a flood cannot keep the loop from its deadlines.
    for (int reads = 0; reads < kMaxReadsPerWake; ++reads) {
      ssize_t n = ::read(fd, buf.data(), buf.size());
      if (n == 0) {
        Keep(stream, filter.Finish(), dest);
        return false;
      }
      if (n < 0) return errno == EAGAIN || errno == EINTR;
      total_ += static_cast<uint64_t>(n);
      if (kept_ >= cap_) {
        truncated_ = true;  // past the cap: dropped unseen, so nothing to mask
        continue;
      }
      Keep(stream, filter.Push(std::string_view(buf.data(), static_cast<size_t>(n))), dest);
    }
    return true;
  }

  // A stream that never reached EOF (the job was killed): release what its
  // filter still holds back, masked.
  void FinishOpen(protocol::Stream stream, std::string* dest) {
    Keep(stream, Filter(stream).Finish(), dest);
  }

  bool flooded() const { return total_ > flood_; }
  bool truncated() const { return truncated_; }
  uint32_t redactions() const { return filters_[0].redactions() + filters_[1].redactions(); }

 private:
  common::SecretsFilter& Filter(protocol::Stream s) {
    return filters_[s == protocol::Stream::kStdout ? 0 : 1];
  }

  void Keep(protocol::Stream stream, std::string masked, std::string* dest) {
    uint64_t room = kept_ < cap_ ? cap_ - kept_ : 0;
    if (masked.size() > room) {
      truncated_ = true;
      masked.resize(static_cast<size_t>(room));
    }
    if (masked.empty()) return;
    dest->append(masked);
    kept_ += masked.size();
    if (options_.on_chunk && job_.stream_output) {
      options_.on_chunk(protocol::OutputChunk{job_.job_id, stream, seq_++, std::move(masked)});
    }
  }

  const protocol::Execute& job_;
  const RunOptions& options_;
  uint64_t cap_;
  uint64_t flood_;
  common::SecretsFilter filters_[2];
  uint64_t total_ = 0;
  uint64_t kept_ = 0;
  uint64_t seq_ = 0;
  bool truncated_ = false;
};

// Reads the control pipe; false at end-of-file. Stops keeping bytes past the cap.
bool ReadControl(int fd, std::string* dest) {
  std::array<char, kReadSize> buf;
  for (int reads = 0; reads < kMaxReadsPerWake; ++reads) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n == 0) return false;
    if (n < 0) return errno == EAGAIN || errno == EINTR;
    size_t room = runtimes::Runtime::kMaxControlBytes + 1 -
                  std::min(dest->size(), runtimes::Runtime::kMaxControlBytes + 1);
    dest->append(buf.data(), std::min(room, static_cast<size_t>(n)));
  }
  return true;
}

// The job's secrets policy: the tenant's registered secrets plus the built-in
// credential patterns. Jobs without registered secrets share one policy.
common::StatusOr<std::shared_ptr<const common::SecretsPolicy>> PolicyFor(
    const protocol::Execute& job) {
  static const auto kPatternsOnly = common::SecretsPolicy::Create({});
  if (job.secrets.empty()) return kPatternsOnly;
  return common::SecretsPolicy::Create(job.secrets);
}

// Keeps a Result inside the wire protocol's limits (messages.hpp), so the
// broker can always decode it: an undecodable Result would leave the job
// without an end.
void FitToWire(protocol::Result* r) {
  auto cut = [](std::string* s, size_t max) {
    if (s->size() > max) s->resize(max);
  };
  if (r->result_json.size() > protocol::kMaxResultJsonBytes) {
    r->result_json.clear();
    if (!r->error) {
      r->error = protocol::ErrorInfo{
          "ResultTooLarge",
          "`result` is larger than " + std::to_string(protocol::kMaxResultJsonBytes) + " bytes",
          ""};
    }
  }
  if (r->error) {
    cut(&r->error->type, 256);
    cut(&r->error->message, protocol::kMaxStringBytes);
    cut(&r->error->traceback, protocol::kMaxStringBytes);
  }
  cut(&r->worker_error, protocol::kMaxStringBytes);
  if (r->stdout_data.size() > protocol::kMaxStreamBytes ||
      r->stderr_data.size() > protocol::kMaxStreamBytes) {
    r->truncated = true;
    cut(&r->stdout_data, protocol::kMaxStreamBytes);
    cut(&r->stderr_data, protocol::kMaxStreamBytes);
  }
  uint64_t total = 0;
  size_t keep = 0;
  for (; keep < r->files.size() && keep < protocol::kMaxFiles; ++keep) {
    total += r->files[keep].content.size();
    if (total > protocol::kMaxFilesBytes) break;
  }
  r->files.resize(keep);
}

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
  Pump pump(job, options, *policy);
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
  }
  result.duration_ms = common::MsSince(start);
  sb.stdin_w.Reset();
  if (out_open) pump.FinishOpen(protocol::Stream::kStdout, &result.stdout_data);
  if (err_open) pump.FinishOpen(protocol::Stream::kStderr, &result.stderr_data);
  spdlog::debug("job {}: setup {:.2f} ms, exit seen {:.2f} ms, done {:.2f} ms{}", job.job_id,
                setup_ms, exit_seen_ms, result.duration_ms, early ? " (before exit)" : "");

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
    auto files = sb.process->CollectFiles(job.collect, options.max_collect_bytes);
    if (files.ok()) {
      result.files = std::move(*files);
    } else {
      result.stderr_data += "\n[kiln] collecting output files failed: " + files.status().message();
    }
  }
  FitToWire(&result);
  return result;
}

}  // namespace kiln::worker
