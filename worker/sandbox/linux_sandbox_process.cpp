// LinuxSandboxProcess (linux_sandbox_internal.hpp): one sandbox of the
// standard level, from its spawn to its teardown. Start builds the ChildPlan
// and clones (or has a zygote clone) the child; the rest is the
// SandboxProcess interface (sandbox.hpp). Only LinuxSandbox
// (linux_sandbox.cpp) creates one; its callers use it as SandboxProcess.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "common/log/logging.hpp"
#include "worker/sandbox/fd_passing.hpp"
#include "worker/sandbox/fs_util.hpp"
#include "worker/sandbox/landlock.hpp"
#include "worker/sandbox/linux_sandbox_internal.hpp"
#include "worker/sandbox/namespaces.hpp"
#include "worker/sandbox/netns_listener.hpp"
#include "worker/sandbox/package_mount.hpp"
#include "worker/sandbox/rlimits.hpp"
#include "worker/sandbox/workspace.hpp"
#include "worker/sandbox/zygote_plan.hpp"

namespace kiln::worker::sandbox::linux_sandbox_internal {
namespace {

const common::SubsystemLog kLog("sandbox");

int PidfdSendSignal(int pidfd, int sig) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

}  // namespace

LinuxSandboxProcess::~LinuxSandboxProcess() {
  if (pid_ > 0 && !reaped_) {
    Kill();
    (void)Wait();
  }
  if (cgroup_) {
    cgroup_->KillAll();
    (void)cgroup_->Destroy();
  }
  if (workspace_mounted_) UnmountWorkspace(workspace_);
  shared_->uids.Release(std::move(uid_lease_));
}

Status LinuxSandboxProcess::Start(SpawnSpec& spec) {
  const SandboxConfig& cfg = shared_->config;
  // The sandbox sees the host's /usr, /bin and /lib: a program missing
  // there is missing inside (kiln-init reports any other failure later).
  program_ = spec.argv.empty() ? "" : spec.argv[0];
  if (program_.empty() || program_[0] != '/' || ::access(program_.c_str(), X_OK) != 0) {
    failed_step_ = "execve";
    return CannotExecute(program_, program_.empty() || program_[0] != '/' ? EINVAL : errno);
  }
  RETURN_IF_ERROR(
      MountWorkspace(workspace_, cfg.workspace_bytes, uid_, uid_).WithContext("workspace"));
  workspace_mounted_ = true;
  std::vector<int> cg_fds;
  if (shared_->cgroups && shared_->Has("cgroups")) {
    ASSIGN_OR_RETURN(cgroup_, shared_->cgroups->CreateFor(id_, spec.limits, spec.freezable));
    for (const UniqueFd& fd : cgroup_->join_fds()) cg_fds.push_back(fd.get());
  }
  MountPlan mounts = BuildMountPlan(shared_->layout, {workspace_, cfg.tmp_bytes, uid_, uid_});
  // pid 1 is kiln-init (worker/init), which runs the program as its child.
  std::vector<const char*> argv = {kSandboxInitPath}, envp;
  for (const std::string& a : spec.argv) argv.push_back(a.c_str());
  argv.push_back(nullptr);
  for (const std::string& e : spec.env) envp.push_back(e.c_str());
  envp.push_back(nullptr);

  ChildPlan plan;
  plan.join_cgroups = !cg_fds.empty();
  plan.cgroup_ns = shared_->Has("cgroup_ns");
  plan.uts_ns = shared_->Has("uts_ns");
  plan.net_ns = shared_->Has("net_ns");
  plan.time_ns = shared_->Has("time_ns");
  plan.loopback = shared_->loopback;
  plan.landlock = shared_->Has("landlock");
  plan.seccomp = shared_->Has("seccomp");
  plan.cgroup_fds = cg_fds.data();
  plan.cgroup_fd_count = static_cast<int>(cg_fds.size());
  plan.mount_ops = mounts.ops.data();
  plan.mount_op_count = mounts.ops.size();
  plan.new_root = mounts.new_root;
  plan.rlimits = RlimitsFor(spec.limits);
  plan.fds[0] = spec.stdin_fd.get();
  plan.fds[1] = spec.stdout_fd.get();
  plan.fds[2] = spec.stderr_fd.get();
  plan.fds[3] = spec.control_fd.get();
  plan.tool_fd = spec.tool_fd.get();
  plan.uid = uid_;
  plan.gid = uid_;
  plan.landlock_abi = shared_->landlock_abi;
  for (int i = 0; i < 2; ++i) {
    const std::vector<sock_filter>& f =
        i == 0 ? shared_->seccomp.syscalls : shared_->seccomp.arguments;
    plan.seccomp_filters[i] = f.data();
    plan.seccomp_lens[i] = static_cast<unsigned short>(f.size());
  }
  plan.argv = argv.data();
  plan.envp = envp.data();

  UniqueFd status_ours, status_theirs;  // kiln-init's reports (worker/init/main.cpp)
  {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return common::ErrnoStatus("pipe for kiln-init", errno);
    // Read without waiting: reports are complete once written (5 bytes).
    ::fcntl(p[0], F_SETFL, O_NONBLOCK);
    status_ours.Reset(p[0]);
    status_theirs.Reset(p[1]);
    plan.status_fd = p[1];
  }
  UniqueFd listener_ours, listener_theirs;
  if (plan.seccomp) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) != 0) {
      return common::ErrnoStatus("socketpair for the seccomp listener", errno);
    }
    listener_ours.Reset(sv[0]);
    listener_theirs.Reset(sv[1]);
    plan.notify_sock = sv[1];
  }

  const unsigned long clone_flags = NamespaceCloneFlags(shared_->layers);
  int pidfd = -1;
  pid_t pid = -1;
  if (!spec.zygote_argv.empty()) {
    if (auto zygote = shared_->ZygoteFor(spec.zygote_argv, spec.env)) {
      auto child = zygote->Spawn(EncodeZygotePlan(plan, clone_flags, spec.env), ZygoteFds(plan));
      if (child.ok()) {
        pid = child->pid;
        pidfd = child->pidfd.Release();
        zygote_ = std::move(zygote);
      } else {
        kLog.Warn({}, "zygote for {}: {}; exec'ing instead", spec.zygote_argv[0],
                  child.status().ToString());
      }
    }
  }
  if (!zygote_) {
    pid = CloneVforked(clone_flags, ContainAndExec, &plan, &pidfd);
    if (pid < 0) return common::ErrnoStatus("clone into new namespaces", -pid);
  }
  pid_ = pid;
  pidfd_.Reset(pidfd);
  listener_theirs.Reset();
  status_theirs.Reset();
  status_ = std::move(status_ours);
  if (zygote_) {
    // Its contain steps run while the caller goes on (a warm pool starts
    // the next one): the first call that needs them done waits
    // (EnsureContained), before any job is given to the program.
    contained_ = false;
    pending_listener_ = std::move(listener_ours);
    seccomp_ = plan.seccomp;
    return Status::Ok();
  }
  if (plan.failed_step != nullptr) {
    (void)Wait();
    return SetupFailed(plan.failed_step, plan.failed_detail, plan.failed_errno);
  }
  if (plan.seccomp) {
    // The child sent its listener before exec (clone returned after it).
    Status st = WatchForViolations(listener_ours.get());
    if (!st.ok()) {
      Kill();
      (void)Wait();
      return st;
    }
  }
  return Status::Ok();
}

Status LinuxSandboxProcess::SetupFailed(const char* step, const char* detail, int err) {
  std::string what = std::string("sandbox setup failed at step '") + step + "'";
  const char* layer = LayerOfStep(step);
  if (layer[0] != '\0') what += std::string(" (layer ") + layer + ")";
  if (detail != nullptr) what += std::string(" on ") + detail;
  what += std::string(": ") + std::strerror(err);
  failed_layer_ = layer;
  failed_step_ = step;
  bool missing_program = std::strcmp(step, "execve") == 0 && (err == ENOENT || err == EACCES);
  return Status(missing_program ? common::Code::kRuntimeUnavailable : common::Code::kInternal,
                what);
}

void LinuxSandboxProcess::ReapQuietly() {
  siginfo_t info;
  std::memset(&info, 0, sizeof info);
  long rc;
  do {
    rc = ::syscall(SYS_waitid, P_PIDFD, pidfd_.get(), &info, WEXITED, nullptr);
  } while (rc != 0 && errno == EINTR);
  reaped_ = true;
}

Status LinuxSandboxProcess::EnsureContained() {
  if (contained_) return setup_;
  contained_ = true;
  ChildPlan plan;
  setup_ = AwaitContained(status_.get(), &plan);
  if (setup_.ok() && plan.failed_step != nullptr) {
    setup_ = SetupFailed(plan.failed_step, plan.failed_detail, plan.failed_errno);
  }
  if (setup_.ok() && seccomp_) setup_ = WatchForViolations(pending_listener_.get());
  pending_listener_.Reset();
  if (!setup_.ok()) Kill();
  return setup_;
}

Status LinuxSandboxProcess::AwaitContained(int status_fd, ChildPlan* plan) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  char rec[5];
  size_t have = 0;
  auto next = [&]() -> bool {  // one whole record into rec, or false
    for (;;) {
      ssize_t n = ::read(status_fd, rec + have, sizeof rec - have);
      if (n > 0) {
        have += static_cast<size_t>(n);
        if (have == sizeof rec) {
          have = 0;
          return true;
        }
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n == 0 || (n < 0 && errno != EAGAIN)) return false;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p[2] = {{status_fd, POLLIN, 0}, {pidfd_.get(), POLLIN, 0}};
      if (::poll(p, 2, static_cast<int>(left.count())) <= 0) continue;
      if (p[0].revents == 0 && p[1].revents != 0) return false;  // ended without a word
    }
  };
  if (!next()) return common::Internal("the sandbox ended or hung before its setup was done");
  int value;
  std::memcpy(&value, rec + 1, sizeof value);
  if (rec[0] == 'R') return Status::Ok();
  if (rec[0] != 'F') return common::Internal("unexpected report from the sandbox's setup");
  plan->failed_errno = value;
  plan->failed_step = "setup";
  if (next() && rec[0] == 'S') {
    std::memcpy(&value, rec + 1, sizeof value);
    if (StepName(value)[0] != '\0') plan->failed_step = StepName(value);
  }
  return Status::Ok();
}

Status LinuxSandboxProcess::WatchForViolations(int sock) {
  // Sent before the child's exec (and so before "R"): there without waiting.
  auto got = ReceiveWithFds(sock, 1, 1, MSG_DONTWAIT);
  if (!got.ok()) return got.status().WithContext("receiving the sandbox's seccomp listener");
  if (got->fds.size() != 1) return common::Internal("the sandbox sent no seccomp listener");
  UniqueFd listener = std::move(got->fds[0]);
  if (!shared_->violations) return common::Internal("no violation watcher");
  ASSIGN_OR_RETURN(violation_, shared_->violations->Add(std::move(listener), pidfd_.get()));
  return Status::Ok();
}

Status LinuxSandboxProcess::SetLimits(const SandboxLimits& limits) {
  if (reaped_) return common::InvalidRequest("the sandbox has already exited");
  RETURN_IF_ERROR(EnsureContained());
  // A session sets its limits before every execution, mostly the same
  // ones: once applied and settled, nothing would change (no cgroup write,
  // no prlimit helper process per statement).
  if (settled_limits_ == limits) return Status::Ok();
  settled_limits_.reset();
  if (cgroup_) RETURN_IF_ERROR(cgroup_->SetLimits(limits));
  // On the program itself: it was forked before the limits were known.
  pid_t program = ProgramPid();
  reports_.ReadFrom(status_.get());
  if (reports_.exec_errno != 0) return CannotExecute(program_, reports_.exec_errno);
  if (program <= 0) return Status::Ok();  // it has already ended: nothing left to limit
  ASSIGN_OR_RETURN(bool settled, ApplyJobRlimits(program, uid_, uid_, limits));
  if (settled) settled_limits_ = limits;
  return Status::Ok();
}

Status LinuxSandboxProcess::AddFiles(const std::vector<common::protocol::FileEntry>& files) {
  return WriteWorkspaceFiles(workspace_, files, uid_, uid_);
}

StatusOr<CollectedFiles> LinuxSandboxProcess::CollectFiles(const std::vector<std::string>& patterns,
                                                           uint64_t max_bytes) {
  return ReadWorkspaceFiles(workspace_, patterns, max_bytes);
}

ExitStatus LinuxSandboxProcess::Usage() const {
  ExitStatus st;
  if (cgroup_) {
    CgroupStats cs = cgroup_->Stats(stats::kCpu | stats::kPeak | stats::kOom);
    if (cs.cpu_ms) st.cpu_ms = *cs.cpu_ms;
    if (cs.peak_bytes) st.max_rss_kb = *cs.peak_bytes / 1024;
    st.oom_killed = cs.oom_killed;
  }
  return st;
}

double LinuxSandboxProcess::CpuMs() const {
  return cgroup_ ? cgroup_->Stats(stats::kCpu).cpu_ms.value_or(0) : 0;
}

std::optional<uint64_t> LinuxSandboxProcess::MemoryBytes() const {
  if (!cgroup_) return std::nullopt;
  return cgroup_->Stats(stats::kCurrent).current_bytes;
}

void LinuxSandboxProcess::Interrupt() {
  // Not yet reaped, so the pid (and the group it leads) cannot have been
  // reused.
  if (pid_ <= 0 || reaped_) return;
  ::kill(-pid_, SIGINT);
}

void LinuxSandboxProcess::Kill() {
  if (pid_ <= 0 || reaped_) return;
  PidfdSendSignal(pidfd_.get(), SIGKILL);
  // Without a pid namespace the rest of the tree is not killed with pid 1.
  if (!shared_->Has("pid_ns") && cgroup_) cgroup_->KillAll();
  // A v1-frozen process dies of SIGKILL only once thawed.
  if (frozen_ && cgroup_) (void)cgroup_->Freeze(false, pid_);
}

Status LinuxSandboxProcess::Freeze(bool frozen) {
  if (!cgroup_) return common::Unavailable("no cgroups: the sandbox cannot be frozen");
  if (pid_ <= 0 || reaped_) return common::Internal("no process");
  RETURN_IF_ERROR(EnsureContained());
  Status st = cgroup_->Freeze(frozen, pid_);
  // A failed freeze may have stopped some: counted as frozen, so Kill thaws.
  frozen_ = frozen || !st.ok();
  return st;
}

Status LinuxSandboxProcess::MountPackages(const std::string& host_dir) {
  // Without its own mount namespace and root, /packages would be the host's.
  if (!shared_->Has("mount_ns") || !shared_->Has("filesystem")) {
    return Status(common::Code::kPackageInstallFailed,
                  "packages on request need the mount_ns and filesystem layers");
  }
  if (pid_ <= 0 || reaped_) return common::Internal("no process");
  RETURN_IF_ERROR(EnsureContained());
  return MountIntoSandbox(pidfd_.get(), pid_, host_dir, kSandboxPackagesPath);
}

StatusOr<common::UniqueFd> LinuxSandboxProcess::ListenForEgress() {
  // Without its own network namespace the job would share the host's.
  if (!shared_->Has("net_ns")) {
    return Status(common::Code::kUnavailable, "network on request needs the net_ns layer");
  }
  if (pid_ <= 0 || reaped_) return common::Internal("no process");
  RETURN_IF_ERROR(EnsureContained());
  return ListenInSandboxNetns(pidfd_.get(), kSandboxProxyPort);
}

StatusOr<ExitStatus> LinuxSandboxProcess::Wait() {
  if (pid_ <= 0) return common::Internal("no process");
  if (reaped_) return common::InvalidRequest("Wait() called twice");
  // Takes the setup's own reports off the status pipe first.
  if (Status st = EnsureContained(); !st.ok()) {
    ReapQuietly();
    return st;
  }
  siginfo_t info;
  std::memset(&info, 0, sizeof info);
  struct rusage ru;
  std::memset(&ru, 0, sizeof ru);
  long rc;
  do {
    rc = ::syscall(SYS_waitid, P_PIDFD, pidfd_.get(), &info, WEXITED, &ru);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) return common::ErrnoStatus("waitid on the sandbox", errno);
  reaped_ = true;
  ExitStatus st;
  if (info.si_code == CLD_EXITED) {
    st.exit_code = info.si_status;
  } else {
    st.signal = info.si_status;
  }
  reports_.ReadFrom(status_.get());
  reports_.ApplyTo(&st);
  st.cpu_ms = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
              (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
  st.max_rss_kb = static_cast<uint64_t>(ru.ru_maxrss);
  if (cgroup_) {
    CgroupStats cs = cgroup_->Stats();
    if (cs.cpu_ms) st.cpu_ms = *cs.cpu_ms;
    // The cgroup peak counts charged pages (anon, tmpfs, page cache it
    // brought in); rusage's counts mapped shared libraries: report the larger.
    if (cs.peak_bytes) st.max_rss_kb = std::max<uint64_t>(st.max_rss_kb, *cs.peak_bytes / 1024);
    st.oom_killed = cs.oom_killed;
  }
  if (violation_ && violation_->fired()) {
    st.seccomp_killed = true;
    st.violation = violation_->Describe();
  }
  return st;
}

pid_t LinuxSandboxProcess::ProgramPid() {
  if (job_pid_ > 0) return job_pid_;
  const std::string children =
      "/proc/" + std::to_string(pid_) + "/task/" + std::to_string(pid_) + "/children";
  for (int waited = 0; waited < kProgramWaitMs; ++waited) {
    auto list = ReadFileString(children);
    if (!list.ok()) return -1;
    pid_t pid = static_cast<pid_t>(std::atoi(list->c_str()));
    if (pid > 0) return job_pid_ = pid;
    pollfd pfd{pidfd_.get(), POLLIN, 0};
    if (::poll(&pfd, 1, 1) != 0) return -1;  // pid 1 has ended
  }
  return -1;
}

}  // namespace kiln::worker::sandbox::linux_sandbox_internal
