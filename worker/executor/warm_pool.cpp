#include "worker/executor/warm_pool.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include "common/log/logging.hpp"
#include "worker/metrics/worker_metrics.hpp"

namespace kiln::worker {
namespace {

const common::SubsystemLog kLog("pool");

struct Pipe {
  common::UniqueFd read, write;
};

common::StatusOr<Pipe> MakePipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return common::ErrnoStatus("pipe2", errno);
  return Pipe{common::UniqueFd(fds[0]), common::UniqueFd(fds[1])};
}

// The tool channel: a stream socket pair, the sandbox's end and the worker's.
common::StatusOr<Pipe> MakeToolChannel() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return common::ErrnoStatus("socketpair", errno);
  }
  return Pipe{common::UniqueFd(fds[0]), common::UniqueFd(fds[1])};
}

void SetNonBlocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

bool Exited(const WarmSandbox& sb) {
  pollfd p{sb.process->exit_fd(), POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

}  // namespace

WarmPool::WarmPool(sandbox::Sandbox* sandbox,
                   std::map<runtimes::Language, runtimes::Runtime> runtimes,
                   sandbox::SandboxLimits launch_limits, size_t per_runtime, WorkerMetrics* metrics,
                   std::chrono::milliseconds refill_hold)
    : sandbox_(sandbox),
      runtimes_(std::move(runtimes)),
      launch_limits_(launch_limits),
      per_runtime_(per_runtime),
      metrics_(metrics),
      refill_hold_(refill_hold) {
  for (const auto& [language, rt] : runtimes_) {
    if (rt.has_preload()) kinds_.push_back({language, false});
    kinds_.push_back({language, true});
  }
  std::lock_guard lock(mu_);
  for (const auto& [language, rt] : runtimes_) PublishReady(language);
}

WarmKind WarmPool::KindOf(runtimes::Language language, bool preloaded) const {
  auto rt = runtimes_.find(language);
  return {language, preloaded || rt == runtimes_.end() || !rt->second.has_preload()};
}

void WarmPool::PublishReady(runtimes::Language language) {
  if (!metrics_) return;
  size_t ready = 0;
  for (bool preloaded : {false, true}) {
    auto it = stock_.find({language, preloaded});
    if (it != stock_.end()) ready += it->second.size();
  }
  metrics_->SetWarm(std::string(runtimes::LanguageName(language)), ready);
}

common::StatusOr<WarmSandbox> WarmPool::SpawnOne(runtimes::Language language, bool preloaded) {
  return Spawn(KindOf(language, preloaded), /*session=*/false);
}

common::StatusOr<WarmSandbox> WarmPool::SpawnSession(runtimes::Language language) {
  return Spawn({language, true}, /*session=*/true);
}

common::StatusOr<WarmSandbox> WarmPool::Spawn(WarmKind kind, bool session) {
  const runtimes::Language language = kind.language;
  auto rt = runtimes_.find(language);
  if (rt == runtimes_.end()) {
    return common::Status(
        common::Code::kRuntimeUnavailable,
        std::string(runtimes::LanguageName(language)) + " is not offered by this worker");
  }
  runtimes::Launch launch =
      session ? rt->second.SessionLaunch() : rt->second.OneShotLaunch(kind.preloaded);
  ASSIGN_OR_RETURN(Pipe in, MakePipe());
  ASSIGN_OR_RETURN(Pipe out, MakePipe());
  ASSIGN_OR_RETURN(Pipe err, MakePipe());
  ASSIGN_OR_RETURN(Pipe ctl, MakePipe());
  ASSIGN_OR_RETURN(Pipe tool, MakeToolChannel());  // .read: the sandbox's, .write: ours
  sandbox::SpawnSpec spec;
  spec.argv = std::move(launch.argv);
  spec.env = std::move(launch.env);
  spec.zygote_argv = std::move(launch.zygote_argv);
  spec.limits = launch_limits_;
  if (session) spec.limits.cpu_ms = kSessionCpuRlimitMs;
  spec.stdin_fd = std::move(in.read);
  spec.stdout_fd = std::move(out.write);
  spec.stderr_fd = std::move(err.write);
  spec.control_fd = std::move(ctl.write);
  spec.tool_fd = std::move(tool.read);
  spec.freezable = session;  // frozen between executions (session_runner.cpp)
  auto start = common::SteadyClock::now();
  ASSIGN_OR_RETURN(auto process, sandbox_->Spawn(std::move(spec)));
  WarmSandbox sb;
  sb.language = language;
  sb.process = std::move(process);
  sb.stdin_w = std::move(in.write);
  sb.stdout_r = std::move(out.read);
  sb.stderr_r = std::move(err.read);
  sb.control_r = std::move(ctl.read);
  sb.tool = std::move(tool.write);
  for (int fd : {sb.stdin_w.get(), sb.stdout_r.get(), sb.stderr_r.get(), sb.control_r.get(),
                 sb.tool.get()}) {
    SetNonBlocking(fd);
  }
  sb.spawned_at = common::SteadyClock::now();
  sb.spawn_ms = common::MsSince(start);
  if (metrics_) {
    metrics_->SandboxStarted(std::string(runtimes::LanguageName(language)), sb.spawn_ms,
                             sb.process->zygote_born() ? "zygote" : "exec");
  }
  return sb;
}

void WarmPool::CountJob(const WarmSandbox* taken) {
  // Jobs overlap, or arrive faster than sandboxes start (the one taken is
  // young, or there was none): keeping the stock up matters more.
  if (++jobs_ > 1 || taken == nullptr ||
      common::SteadyClock::now() - taken->spawned_at < kSettledAge) {
    refill_at_ = {};
    return;
  }
  refill_at_ = common::SteadyClock::now() + refill_hold_;
}

common::StatusOr<WarmSandbox> WarmPool::Take(runtimes::Language language, bool preloaded) {
  const WarmKind kind = KindOf(language, preloaded);
  {
    std::unique_lock lock(mu_);
    auto& q = stock_[kind];
    // The refill is building one: wait for it rather than build a second
    // next to it (two builds on a small host take as long as both in a row).
    // One Take waits per build; the others start their own.
    if (q.empty() && refilling_ == kind && !refill_claimed_) {
      refill_claimed_ = true;
      wake_.wait(lock, [&] { return !q.empty() || refilling_ != kind; });
      refill_claimed_ = false;
    }
    while (!q.empty()) {
      WarmSandbox sb = std::move(q.front());
      q.pop_front();
      PublishReady(language);
      if (Exited(sb)) {
        kLog.Warn({}, "a warm {} sandbox died while waiting; discarding it",
                  runtimes::LanguageName(language));
        continue;
      }
      CountJob(&sb);
      wake_.notify_all();
      return sb;
    }
    CountJob(nullptr);
  }
  wake_.notify_all();
  return Spawn(kind, /*session=*/false);
}

void WarmPool::JobDone() {
  {
    std::lock_guard lock(mu_);
    if (jobs_ > 0) --jobs_;
    refill_at_ = {};
  }
  wake_.notify_all();
}

size_t WarmPool::Ready(runtimes::Language language, bool preloaded) const {
  std::lock_guard lock(mu_);
  auto it = stock_.find(KindOf(language, preloaded));
  return it == stock_.end() ? 0 : it->second.size();
}

bool WarmPool::Refilling(runtimes::Language language, bool preloaded) const {
  std::lock_guard lock(mu_);
  return refilling_ == KindOf(language, preloaded);
}

void WarmPool::Run(std::stop_token stop) {
  while (!stop.stop_requested()) {
    {
      std::unique_lock lock(mu_);
      wake_.wait_until(lock, stop, refill_at_,
                       [&] { return common::SteadyClock::now() >= refill_at_; });
    }
    if (stop.stop_requested()) break;
    bool spawned = false;
    bool failed = false;
    for (const WarmKind& kind : kinds_) {
      if (stop.stop_requested()) break;
      {
        std::lock_guard lock(mu_);
        if (stock_[kind].size() >= per_runtime_) continue;
        refilling_ = kind;
      }
      auto sb = Spawn(kind, /*session=*/false);
      {
        std::lock_guard lock(mu_);
        refilling_.reset();
        if (sb.ok()) {
          stock_[kind].push_back(std::move(*sb));
          PublishReady(kind.language);
        }
      }
      wake_.notify_all();  // a Take may be waiting for this one
      if (!sb.ok()) {
        kLog.Error({}, "cannot start a warm {} sandbox: {}", runtimes::LanguageName(kind.language),
                   sb.status().ToString());
        failed = true;
        continue;
      }
      spawned = true;
    }
    if (spawned && !failed) continue;
    std::unique_lock lock(mu_);
    if (failed) {
      // Do not spin on a host that refuses sandboxes: retry in a second.
      wake_.wait_for(lock, stop, std::chrono::seconds(1), [] { return false; });
      continue;
    }
    // Stock full: sleep until a Take or a stop.
    wake_.wait_for(lock, stop, std::chrono::seconds(1), [&] {
      for (const WarmKind& kind : kinds_) {
        if (stock_[kind].size() < per_runtime_) return true;
      }
      return false;
    });
  }
  std::lock_guard lock(mu_);
  stock_.clear();
  for (const auto& [language, rt] : runtimes_) PublishReady(language);
}

}  // namespace kiln::worker
