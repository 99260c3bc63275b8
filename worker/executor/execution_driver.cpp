#include "worker/executor/execution_driver.hpp"

#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <array>

#include "common/rich_output.hpp"

namespace kiln::worker {

ExecutionDriver::ExecutionDriver(const protocol::Execute& job, WarmSandbox& sandbox,
                                 const RunOptions& options, DriverSpec spec)
    : job_(job),
      sb_(sandbox),
      options_(options),
      spec_(std::move(spec)),
      start_(common::SteadyClock::now()) {
  result_.job_id = job.job_id;
}

common::Status ExecutionDriver::Setup() {
  const uint64_t cpu_budget = job_.limits.cpu_ms ? job_.limits.cpu_ms : job_.limits.timeout_ms;
  cpu_budget_ms_ = static_cast<double>(cpu_budget);
  sandbox::SandboxLimits limits;
  limits.memory_bytes = std::min(job_.limits.memory_mb, options_.max_memory_mb) << 20;
  limits.max_pids = static_cast<uint32_t>(std::max<uint64_t>(job_.limits.max_pids, 1));
  limits.cpu_ms = spec_.cpu_rlimit_ms.value_or(cpu_budget);
  if (auto st = sb_.process->SetLimits(limits); !st.ok()) {
    sandbox_lost_ = true;
    return st;
  }
  if (!job_.files.empty()) {
    if (auto st = sb_.process->AddFiles(job_.files); !st.ok()) {
      // A bad path is the client's fault; say so plainly.
      return st.WithContext("writing input files");
    }
  }
  setup_ms_ = common::MsSince(start_);
  poll_until_ = common::SteadyClock::now() + options_.poll_without_sleep;
  const auto clock = spec_.clock_after_setup ? common::SteadyClock::now() : start_;
  if (spec_.cpu_from_start) cpu_start_ms_ = spec_.cpu_start_ms.value_or(sb_.process->CpuMs());
  const uint64_t timeout_ms =
      std::min(job_.limits.timeout_ms ? job_.limits.timeout_ms : options_.max_timeout_ms,
               options_.max_timeout_ms);
  machine_.emplace(spec_.machine, clock, std::chrono::milliseconds(timeout_ms), cpu_budget_ms_);
  auto policy = PolicyFor(job_);
  if (!policy.ok()) return policy.status().WithContext("secrets");
  policy_ = *std::move(policy);
  pump_.emplace(job_, options_, policy_);
  if (options_.tool_answers && options_.on_tool_call && sb_.tool.valid()) {
    tools_.emplace(job_, *policy_, options_.on_tool_call);
    tools_open_ = true;
    options_.tool_answers->Take();  // answers to an earlier execution's calls
  }
  return common::Status::Ok();
}

common::Status ExecutionDriver::Run(std::string frame, int cancel_fd) {
  frame_bytes_ = std::move(frame);
  RETURN_IF_ERROR(Setup());
  if (spec_.close_stdin && frame_bytes_.empty()) sb_.stdin_w.Reset();
  if (spec_.resume) {
    WriteFrame();
    if (auto st = spec_.resume(); !st.ok()) {
      sandbox_lost_ = true;
      return st;
    }
  }
  const std::function<double()> cpu_ms = [this] { return sb_.process->CpuMs() - cpu_start_ms_; };
  auto apply = [&](StopAction action) {
    if (action == StopAction::kInterrupt) sb_.process->Interrupt();
    if (action == StopAction::kKill) sb_.process->Kill();
  };
  enum class Source {
    kStdin,
    kStdout,
    kStderr,
    kControl,
    kExit,
    kCancel,
    kNetworkLimit,
    kTools,
    kToolAnswers
  };
  std::array<pollfd, 9> fds;
  std::array<Source, 9> sources;
  while (true) {
    auto now = common::SteadyClock::now();
    apply(machine_->Tick(now, pump_->flooded(), cpu_ms));
    if (machine_->state() == ExecState::kDone) break;
    if (tools_) {
      tools_->Tick(now);
      if (tools_->wants_write()) tools_->Write(sb_.tool.get());
    }
    size_t nfds = 0;
    auto add = [&](int fd, short events, Source source) {
      fds[nfds] = pollfd{fd, events, 0};
      sources[nfds++] = source;
    };
    if (frame_off_ < frame_bytes_.size()) add(sb_.stdin_w.get(), POLLOUT, Source::kStdin);
    if (machine_->open(Pipe::kStdout)) add(sb_.stdout_r.get(), POLLIN, Source::kStdout);
    if (machine_->open(Pipe::kStderr)) add(sb_.stderr_r.get(), POLLIN, Source::kStderr);
    if (machine_->open(Pipe::kControl)) add(sb_.control_r.get(), POLLIN, Source::kControl);
    if (!machine_->exited()) add(sb_.process->exit_fd(), POLLIN, Source::kExit);
    // The cancel eventfd is never read: once a cancel counts, it is not watched.
    if (cancel_fd >= 0 && machine_->wants_cancel()) add(cancel_fd, POLLIN, Source::kCancel);
    // Like the cancel fd, never read: watched until it fires once.
    if (options_.network_limit_fd >= 0 && !network_limit_seen_) {
      add(options_.network_limit_fd, POLLIN, Source::kNetworkLimit);
    }
    // Calls are read only while the execution runs: a stopping one is
    // being killed or interrupted, and its answers would find nobody.
    if (tools_ && machine_->state() == ExecState::kRunning) {
      const short events =
          static_cast<short>((tools_open_ ? POLLIN : 0) | (tools_->wants_write() ? POLLOUT : 0));
      if (events != 0) add(sb_.tool.get(), events, Source::kTools);
      add(options_.tool_answers->fd(), POLLIN, Source::kToolAnswers);
    }
    auto until = machine_->WakeBy(now);
    if (tools_) {
      if (auto next = tools_->NextDeadline()) until = std::min(until, *next);
    }
    // Buffered output leaves within kChunkFlushInterval even if the execution goes quiet.
    if (auto flush = pump_->NextFlush()) until = std::min(until, *flush);
    int wait_ms = static_cast<int>(std::max<int64_t>(
        1, std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count() + 1));
    // Busy polling (busy_poll.hpp): no sleep, so this CPU stays awake; a
    // yield lets anything else runnable here (the sandbox itself) go first.
    const bool spin = now < poll_until_;
    int n = ::poll(fds.data(), nfds, spin ? 0 : wait_ms);
    if (n == 0 && spin) ::sched_yield();
    if (n < 0 && errno != EINTR) {
      const int err = errno;
      sb_.process->Kill();
      sandbox_lost_ = true;
      return common::ErrnoStatus("poll", err);
    }
    for (size_t i = 0; i < nfds; ++i) {
      if (fds[i].revents == 0) continue;
      switch (sources[i]) {
        case Source::kStdin:
          WriteFrame();
          break;
        case Source::kStdout:
          if (!pump_->ReadOutput(fds[i].fd, protocol::Stream::kStdout, &result_.stdout_data)) {
            machine_->OnEof(Pipe::kStdout);
          }
          break;
        case Source::kStderr:
          if (!pump_->ReadOutput(fds[i].fd, protocol::Stream::kStderr, &result_.stderr_data)) {
            machine_->OnEof(Pipe::kStderr);
          }
          break;
        case Source::kControl:
          OnControl(fds[i].fd);
          break;
        case Source::kExit:
          exit_seen_ms_ = common::MsSince(start_);
          machine_->OnExit(common::SteadyClock::now());
          break;
        case Source::kCancel:
          apply(machine_->OnCancel(common::SteadyClock::now()));
          break;
        case Source::kNetworkLimit:
          network_limit_seen_ = true;
          apply(machine_->OnNetworkLimit(common::SteadyClock::now()));
          break;
        case Source::kTools:
          if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) &&
              !tools_->Read(fds[i].fd, common::SteadyClock::now())) {
            tools_open_ = false;
          }
          if (tools_->wants_write()) tools_->Write(fds[i].fd);
          break;
        case Source::kToolAnswers:
          for (auto& answer : options_.tool_answers->Take()) tools_->OnResult(answer);
          tools_->Write(sb_.tool.get());
          break;
      }
    }
    pump_->FlushDue(common::SteadyClock::now());
  }
  Drain();
  return common::Status::Ok();
}

void ExecutionDriver::WriteFrame() {
  while (frame_off_ < frame_bytes_.size()) {
    ssize_t w = ::write(sb_.stdin_w.get(), frame_bytes_.data() + frame_off_,
                        frame_bytes_.size() - frame_off_);
    if (w > 0) {
      frame_off_ += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && (errno == EAGAIN || errno == EINTR)) return;
    frame_off_ = frame_bytes_.size();  // the wrapper is gone: its exit tells why
  }
  if (spec_.close_stdin) sb_.stdin_w.Reset();  // EOF: the wrapper starts the job
}

void ExecutionDriver::OnControl(int fd) {
  if (!spec_.frames) {
    const bool open = ReadControl(fd, &control_);
    if (!control_.empty()) machine_->OnFrame();
    if (!open) machine_->OnEof(Pipe::kControl);
    return;
  }
  std::array<char, kReadSize> buf;
  for (int reads = 0; reads < kMaxReadsPerWake && !frame_; ++reads) {
    ssize_t r = ::read(fd, buf.data(), buf.size());
    if (r == 0) {
      // The driver closed its control pipe: it is gone.
      machine_->OnEof(Pipe::kControl);
      machine_->OnExit(common::SteadyClock::now());
      break;
    }
    if (r < 0) break;
    spec_.frames->Feed(std::string_view(buf.data(), static_cast<size_t>(r)));
    frame_ = spec_.frames->Next();
  }
  if (!frame_) frame_ = spec_.frames->Next();
  if (frame_) machine_->OnFrame();
}

void ExecutionDriver::Drain() {
  // One-shot: the job ended when its pipes closed (or their grace ran out).
  if (spec_.machine.drain_grace) result_.duration_ms = common::MsSince(start_);
  if (tools_) {
    tools_->Close();
    tools_->Write(sb_.tool.get());  // what the socket takes now; a session reads it when thawed
  }
  if (spec_.close_stdin) sb_.stdin_w.Reset();
  auto drain = [&](Pipe pipe, int fd, protocol::Stream stream, std::string* dest) {
    bool open = machine_->open(pipe);
    // Sessions: everything the execution printed before its frame is in
    // the pipes now; take what they hold, without waiting for more.
    while (open && !spec_.machine.drain_grace) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0) break;
      open = pump_->ReadOutput(fd, stream, dest);
    }
    // The filter holds back a possible secret's prefix at the end: the
    // output ends here, so release it (masked).
    if (open) pump_->FinishOpen(stream, dest);
  };
  drain(Pipe::kStdout, sb_.stdout_r.get(), protocol::Stream::kStdout, &result_.stdout_data);
  drain(Pipe::kStderr, sb_.stderr_r.get(), protocol::Stream::kStderr, &result_.stderr_data);
  pump_->FlushAll();  // every streamed byte leaves before the Result
  if (!spec_.machine.drain_grace) result_.duration_ms = common::MsSince(start_);
  result_.truncated = pump_->truncated();
  result_.redactions = pump_->redactions();
}

void MaskOutcome(const protocol::Execute& job, const common::SecretsPolicy& policy,
                 runtimes::Runtime::Outcome* outcome, uint32_t* redactions) {
  outcome->result_json = policy.Mask(outcome->result_json, redactions);
  if (outcome->error) {
    outcome->error->message = policy.Mask(outcome->error->message, redactions);
    outcome->error->traceback = policy.Mask(outcome->error->traceback, redactions);
  }
  std::optional<common::StatusOr<std::shared_ptr<const common::SecretsPolicy>>> secrets;
  for (auto& o : outcome->outputs) {
    if (common::IsTextMime(o.mime)) {
      o.data = policy.Mask(o.data, redactions);
      continue;
    }
    if (job.secrets.empty()) continue;
    if (!secrets) {
      secrets = common::SecretsPolicy::Create(job.secrets, common::SecretsPolicy::Patterns::kNone);
    }
    // PolicyFor accepted the same secrets, so this cannot fail; if it did,
    // no output may leave unmasked.
    o.data = secrets->ok() ? (**secrets)->Mask(o.data, redactions) : std::string();
  }
}

std::optional<protocol::EndReason> StopEndReason(StopReason stop) {
  switch (stop) {
    case StopReason::kTimeout:
      return protocol::EndReason::kTimeout;
    case StopReason::kCancel:
      return protocol::EndReason::kCancelled;
    case StopReason::kFlood:
      return protocol::EndReason::kOutputLimit;
    case StopReason::kNetworkLimit:
      return protocol::EndReason::kNetworkLimit;
    case StopReason::kNone:
      break;
  }
  return std::nullopt;
}

}  // namespace kiln::worker
