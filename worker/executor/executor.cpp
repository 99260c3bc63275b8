#include "worker/executor/executor.hpp"

#include <sys/eventfd.h>

#include "common/clock.hpp"
#include "common/json/bounded_json.hpp"
#include "common/log/logging.hpp"
#include "common/network_policy.hpp"
#include "common/package_spec.hpp"
#include "common/protocol/session_key.hpp"
#include "worker/executor/output_pump.hpp"
#include "worker/executor/session_runner.hpp"
#include "worker/metrics/worker_metrics.hpp"
#include "worker/sandbox/cgroups.hpp"
#include "worker/sandbox/landlock.hpp"

namespace kiln::worker {

using common::protocol::SessionIdOf;
namespace {

const common::SubsystemLog kJobsLog("jobs");
const common::SubsystemLog kSessionsLog("sessions");

}  // namespace

namespace protocol = common::protocol;

Executor::Executor(RunOptions options, uint32_t slots, WarmPool* pool, EventQueue* events,
                   WorkerMetrics* metrics, PackageCache* packages, EgressGateway* egress)
    : options_(std::move(options)),
      slots_(slots),
      pool_(pool),
      events_(events),
      metrics_(metrics),
      packages_(packages),
      egress_(egress),
      sessions_(pool, options_.idle_sessions, options_.session_stop_after) {}

Executor::~Executor() {
  CancelAll();
  std::unique_lock lock(mu_);
  idle_.wait(lock, [&] { return threads_ == 0; });
}

common::Status Executor::Start(protocol::Execute job, std::string broker) {
  auto language = runtimes::ParseLanguage(job.language);
  if (!language.ok() || pool_->runtimes().count(*language) == 0) {
    return common::Status(common::Code::kRuntimeUnavailable,
                          "this worker does not offer " + job.language);
  }
  int cancel_fd = -1;
  std::shared_ptr<ToolMailbox> answers;
  {
    std::lock_guard lock(mu_);
    if (running_.size() >= slots_) return common::Unavailable("all slots are busy");
    if (running_.count(job.job_id) != 0) return common::Unavailable("job already running");
    common::UniqueFd fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!fd.valid()) return common::ErrnoStatus("eventfd", errno);
    answers = std::make_shared<ToolMailbox>();
    if (answers->fd() < 0) return common::ErrnoStatus("eventfd", errno);
    cancel_fd = fd.get();
    running_.emplace(job.job_id, RunningJob{std::move(fd), answers});
    ++threads_;
    if (metrics_) metrics_->SetRunning(running_.size());
  }
  job_threads_.Run([this, job = std::move(job), broker = std::move(broker), cancel_fd,
                    answers = std::move(answers)]() mutable {
    RunOne(std::move(job), std::move(broker), cancel_fd, answers.get());
  });
  return common::Status::Ok();
}

void Executor::RunOne(protocol::Execute job, std::string broker, int cancel_fd,
                      ToolMailbox* tool_answers) {
  auto language = runtimes::ParseLanguage(job.language);
  // Frees the slot and posts the Result in one step: the broker may send the
  // next job as soon as it sees it, and a Register lists running jobs, then
  // the queue (RunningJobs).
  auto deliver = [&](protocol::Result result) {
    if (result.reason == protocol::EndReason::kError) {
      kJobsLog.Warn({.job = job.job_id, .tenant = job.tenant}, "the job could not run: {}",
                    result.worker_error);
    }
    if (metrics_) {
      metrics_->JobFinished(std::string(runtimes::LanguageName(*language)),
                            protocol::EndReasonName(result.reason));
    }
    std::lock_guard lock(mu_);
    running_.erase(job.job_id);
    last_end_ = common::SteadyClock::now();
    if (metrics_) metrics_->SetRunning(running_.size());
    events_->Post({broker, std::move(result)});
  };
  RunOptions opts = options_;
  // One-shot jobs only: a paced session statement, already ~0.35 ms in its
  // sandbox, measured no faster for it (docs/performance.md).
  if (job.session_id.empty()) {
    std::lock_guard lock(mu_);
    opts.poll_without_sleep = options_.busy_poll.For(static_cast<uint32_t>(running_.size()),
                                                     common::SteadyClock::now(), last_end_);
  }
  opts.tool_answers = tool_answers;
  opts.on_tool_call = [this, &broker](protocol::ToolCall c) {
    events_->Post({broker, std::move(c)});
  };
  if (job.stream_output) {
    opts.on_chunk = [this, &broker](protocol::OutputChunk c) {
      events_->Post({broker, std::move(c)});
    };
  }
  if (!job.session_id.empty()) {
    RunSession(job, opts, cancel_fd, deliver);
  } else {
    // A one-shot sandbox (and the package set it sees) lives until this
    // block ends: after the Result left. Packages are installed before a
    // warm sandbox is taken, so none idles out of the pool for the install.
    const runtimes::Runtime& runtime = pool_->runtimes().at(*language);
    common::StatusOr<std::shared_ptr<const PackageSet>> set = std::shared_ptr<const PackageSet>();
    if (!job.packages.empty())
      set = AcquirePackages(job.tenant, job.language, job.packages, cancel_fd);
    if (!set.ok()) {
      deliver(PackageErrorResult(job, set.status()));
    } else if (auto sb = pool_->Take(*language, runtime.NeedsPreload(job.code)); !sb.ok()) {
      deliver(ErrorResult(job, sb.status()));
    } else if (common::Status mounted =
                   *set ? sb->process->MountPackages((*set)->path()) : common::Status::Ok();
               !mounted.ok()) {
      deliver(PackageErrorResult(job, mounted));
    } else if (auto egress = OpenEgress(egress_, &job, *sb->process); !egress.ok()) {
      deliver(ErrorResult(job, egress.status()));
    } else {
      if (*egress) opts.network_limit_fd = (*egress)->limit_fd();
      protocol::Result result = RunJob(job, *sb, runtime, opts, cancel_fd);
      FinishEgress(egress->get(), &result);
      deliver(std::move(result));
    }
    // The sandbox (and its workspace) is destroyed here, after the Result left.
  }
  // Its replacement may start now: not next to the job, the Result's way out
  // or the teardown (a held refill starts after kRefillHold at the latest).
  if (job.session_id.empty()) pool_->JobDone();
  std::lock_guard lock(mu_);
  --threads_;
  idle_.notify_all();
}

void Executor::RunSession(const protocol::Execute& job, const RunOptions& opts, int cancel_fd,
                          const std::function<void(protocol::Result)>& deliver) {
  auto lease = sessions_.Acquire(job);
  if (!lease.ok()) {
    protocol::Result r = ErrorResult(job, lease.status());
    r.session_epoch = job.session_epoch;
    deliver(std::move(r));
    return;
  }
  if (common::Status st = MountSessionPackages(job, cancel_fd, *lease->session); !st.ok()) {
    protocol::Result r = PackageErrorResult(job, st);
    r.session_epoch = job.session_epoch;
    deliver(std::move(r));
    sessions_.Release(lease->session, /*destroy=*/false);
    return;
  }
  // Network is per execution: the gateway listens in the session's
  // namespace only while this execution runs.
  std::optional<protocol::Execute> with_proxy;
  if (!job.network_allow.empty()) with_proxy.emplace(job);
  common::StatusOr<std::unique_ptr<EgressLease>> egress = std::unique_ptr<EgressLease>();
  if (with_proxy) egress = OpenEgress(egress_, &*with_proxy, *lease->session->sandbox.process);
  if (!egress.ok()) {
    protocol::Result r = ErrorResult(job, egress.status());
    r.session_epoch = job.session_epoch;
    deliver(std::move(r));
    sessions_.Release(lease->session, /*destroy=*/false);
    return;
  }
  RunOptions run_opts = opts;
  if (*egress) run_opts.network_limit_fd = (*egress)->limit_fd();
  auto language = runtimes::ParseLanguage(job.language);
  SessionRun run = RunSessionExecution(with_proxy ? *with_proxy : job, *lease->session,
                                       pool_->runtimes().at(*language), run_opts, cancel_fd,
                                       opts.interrupt_grace);
  FinishEgress(egress->get(), &run.result);
  run.result.session_epoch = job.session_epoch;
  run.result.session_reset = lease->state_lost || run.destroy;
  const std::string reason(protocol::EndReasonName(run.result.reason));
  deliver(std::move(run.result));
  // Off the Result's path, still holding the session: it is stopped until
  // its next execution, now or once idle for worker.session_stop_after_ms.
  if (run.destroy) {
    kSessionsLog.Info(
        {.job = job.job_id, .session = SessionIdOf(job.session_id), .tenant = job.tenant},
        "session sandbox destroyed after the execution ({})", reason);
  }
  size_t reclaimed =
      run.destroy ? sessions_.Release(lease->session, true) : sessions_.Rest(lease->session);
  if (metrics_) {
    metrics_->SetSessions(sessions_.size());
    metrics_->SetIdleSessionMemory(sessions_.IdleBytes());
    if (reclaimed > 0) metrics_->SessionsReclaimed(reclaimed);
  }
}

common::StatusOr<std::shared_ptr<const PackageSet>> Executor::AcquirePackages(
    const std::string& tenant, const std::string& language, const std::vector<std::string>& specs,
    int cancel_fd) {
  if (packages_ == nullptr) {
    return common::Status(common::Code::kPackageInstallFailed,
                          "packages: this worker installs no packages on request");
  }
  return packages_->Acquire(tenant, language, specs, cancel_fd);
}

common::Status Executor::MountSessionPackages(const protocol::Execute& job, int cancel_fd,
                                              SessionSandbox& session) {
  if (job.packages.empty()) return common::Status::Ok();
  // A session keeps what its earlier executions asked for: the union is one set.
  ASSIGN_OR_RETURN(std::vector<std::string> wanted,
                   common::MergePackageSpecs(job.language, session.packages, job.packages));
  if (wanted == session.packages) return common::Status::Ok();
  ASSIGN_OR_RETURN(std::shared_ptr<const PackageSet> set,
                   AcquirePackages(job.tenant, job.language, wanted, cancel_fd));
  // A frozen session thaws only for its execution; the mount needs no thaw.
  RETURN_IF_ERROR(session.sandbox.process->MountPackages(set->path()));
  session.packages = std::move(wanted);
  session.package_set = std::move(set);  // the previous set is let go
  return common::Status::Ok();
}

common::StatusOr<std::unique_ptr<EgressLease>> OpenEgress(EgressGateway* gateway,
                                                          protocol::Execute* job,
                                                          sandbox::SandboxProcess& process) {
  if (job->network_allow.empty()) return std::unique_ptr<EgressLease>();
  auto refuse = [](const std::string& why) {
    return common::Status(common::Code::kNetworkNotAllowed, "network: " + why);
  };
  if (gateway == nullptr) return refuse("this worker's egress gateway is off (network.egress)");
  // The broker checked the list; a worker trusts no party blindly.
  auto allow = common::ParseDestinations(job->network_allow, "network");
  if (!allow.ok()) return refuse(allow.status().message());
  auto listener = process.ListenForEgress();
  if (!listener.ok()) return refuse(listener.status().message());
  ASSIGN_OR_RETURN(std::unique_ptr<EgressLease> lease,
                   gateway->Open(std::move(*listener),
                                 EgressJob{job->job_id, std::move(*allow), job->network_max_bytes,
                                           job->network_max_connections}));
  const std::string proxy = "http://127.0.0.1:" + std::to_string(sandbox::kSandboxProxyPort);
  for (const char* name : {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"}) {
    job->env[name] = proxy;
  }
  // The gateway resolves names; nothing local is to bypass it.
  job->env["NO_PROXY"] = job->env["no_proxy"] = "";
  return lease;
}

void FinishEgress(EgressLease* lease, protocol::Result* result) {
  if (lease == nullptr) return;
  const common::NetworkUsage usage = lease->Finish();
  result->network_json = common::DumpJson(usage.ToJson());
  if (result->reason == protocol::EndReason::kNetworkLimit) {
    result->worker_error = lease->LimitMessage();
  }
}

protocol::Result PackageErrorResult(const protocol::Execute& job, const common::Status& st) {
  if (st.code() != common::Code::kCancelled) return ErrorResult(job, st);
  protocol::Result r;
  r.job_id = job.job_id;
  r.reason = protocol::EndReason::kCancelled;
  return r;
}

void Executor::CloseSession(const std::string& session_id) {
  sessions_.Close(session_id);
  if (metrics_) metrics_->SetSessions(sessions_.size());
}

size_t Executor::ExpireSessions() {
  size_t n = sessions_.ExpireIdle(std::chrono::steady_clock::now());
  if (metrics_) metrics_->SetSessions(sessions_.size());
  return n;
}

void Executor::RefreshCgroupUsage() {
  const sandbox::CgroupManager* cgroups = pool_->sandbox()->cgroups();
  if (metrics_ && cgroups) metrics_->SetCgroupUsage(cgroups->Usage());
}

void Executor::Cancel(const std::string& job_id) {
  std::lock_guard lock(mu_);
  auto it = running_.find(job_id);
  if (it == running_.end()) return;
  uint64_t one = 1;
  ssize_t n = ::write(it->second.cancel.get(), &one, sizeof(one));
  (void)n;
}

void Executor::DeliverToolResult(protocol::ToolResult result) {
  std::lock_guard lock(mu_);
  auto it = running_.find(result.job_id);
  if (it != running_.end()) it->second.tool_answers->Post(std::move(result));
}

void Executor::CancelAll() {
  std::lock_guard lock(mu_);
  for (auto& [id, job] : running_) {
    uint64_t one = 1;
    ssize_t n = ::write(job.cancel.get(), &one, sizeof(one));
    (void)n;
  }
}

uint32_t Executor::Running() const {
  std::lock_guard lock(mu_);
  return static_cast<uint32_t>(running_.size());
}

std::vector<std::string> Executor::RunningJobs() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> ids;
  ids.reserve(running_.size());
  for (const auto& [id, job] : running_) ids.push_back(id);
  return ids;
}

bool Executor::WaitIdle(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return idle_.wait_for(lock, timeout, [&] { return threads_ == 0; });
}

}  // namespace kiln::worker
