// Sandbox and SandboxProcess on Linux: the parent side of every layer.
//
// Spawn: take a uid, mount the host workspace tmpfs, create the cgroup(s),
// build the ChildPlan (all strings and the mount list), then clone() with
// CLONE_VM | CLONE_VFORK and the namespace flags. The child joins its cgroups
// by itself, so the parent needs no sync pipe; clone() returns once the child
// has exec'd kiln-init (worker/init), which forks the program, or failed (the
// plan says where).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>

#include "common/log/logging.hpp"
#include "worker/sandbox/cgroups.hpp"
#include "worker/sandbox/contain.hpp"
#include "worker/sandbox/fd_passing.hpp"
#include "worker/sandbox/fs_util.hpp"
#include "worker/sandbox/gvisor_sandbox.hpp"
#include "worker/sandbox/host_probe.hpp"
#include "worker/sandbox/init_reports.hpp"
#include "worker/sandbox/landlock.hpp"
#include "worker/sandbox/mounts.hpp"
#include "worker/sandbox/namespaces.hpp"
#include "worker/sandbox/rlimits.hpp"
#include "worker/sandbox/sandbox.hpp"
#include "worker/sandbox/seccomp_policy.hpp"
#include "worker/sandbox/uid_pool.hpp"
#include "worker/sandbox/violation_watcher.hpp"
#include "worker/sandbox/workspace.hpp"
#include "worker/sandbox/zygote.hpp"
#include "worker/sandbox/zygote_plan.hpp"

namespace kiln::worker::sandbox {
namespace {

using common::Status;
using common::StatusOr;
using common::UniqueFd;

const common::SubsystemLog kLog("sandbox");

// A zygote that died before serving anyone is not started again for this
// long: its sandboxes are exec'd meanwhile.
constexpr auto kZygoteRetry = std::chrono::seconds(30);

// What every spawn of one Sandbox shares (immutable after Create, but the pool).
struct Shared {
  SandboxConfig config;
  std::set<std::string> layers;
  std::unique_ptr<CgroupManager> cgroups;  // null when the layer is relaxed away
  SeccompFilters seccomp;
  // Set when the seccomp layer is on: kills a sandbox that calls from the
  // kill list and says which call it was.
  std::unique_ptr<ViolationWatcher> violations;
  FilesystemLayout layout;
  int landlock_abi = 0;
  UidPool uids;
  // `lo` comes up in each network namespace; false once it could not and
  // net_ns was relaxed: the namespace is kept without it (no network at all).
  bool loopback = true;
  std::atomic<uint64_t> counter{0};
  // libkiln-zygote.so next to kiln-init; empty: no zygotes on this host.
  std::string zygote_library;
  struct ZygoteSlot {
    std::shared_ptr<Zygote> zygote;
    std::chrono::steady_clock::time_point retry_at{};
  };
  std::mutex zygote_mu;
  std::map<std::vector<std::string>, ZygoteSlot> zygotes;  // by argv

  // The live zygote for `argv`, started on first use or after the last one
  // died; null when zygotes are off or this one keeps failing.
  std::shared_ptr<Zygote> ZygoteFor(const std::vector<std::string>& argv,
                                    const std::vector<std::string>& env) {
    if (!config.zygote || zygote_library.empty()) return nullptr;
    std::lock_guard lock(zygote_mu);
    ZygoteSlot& slot = zygotes[argv];
    if (slot.zygote && slot.zygote->alive()) return slot.zygote;
    auto now = std::chrono::steady_clock::now();
    if (slot.zygote && slot.zygote->spawned() == 0) slot.retry_at = now + kZygoteRetry;
    slot.zygote.reset();  // its sandboxes keep it (and its thread) while they live
    if (now < slot.retry_at) return nullptr;
    auto z = Zygote::Start(argv, env, zygote_library);
    if (!z.ok()) {
      kLog.Warn({}, "cannot start a zygote for {}: {}", argv[0], z.status().ToString());
      slot.retry_at = now + kZygoteRetry;
      return nullptr;
    }
    slot.zygote = std::move(*z);
    return slot.zygote;
  }

  Shared(const SandboxConfig& c) : config(c), uids(c.uid_base, c.uid_count, c.uid_lock_dir) {}
  bool Has(const char* layer) const { return layers.count(layer) != 0; }
};

int PidfdSendSignal(int pidfd, int sig) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

class LinuxSandboxProcess final : public SandboxProcess {
 public:
  LinuxSandboxProcess(std::shared_ptr<Shared> shared, UidLease uid, std::string id)
      : shared_(std::move(shared)), uid_(uid.uid), uid_lease_(std::move(uid)), id_(std::move(id)) {
    workspace_ = shared_->config.state_dir + "/ws/" + id_;
  }
  ~LinuxSandboxProcess() override {
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

  Status Start(SpawnSpec& spec) {
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

  Status SetupFailed(const char* step, const char* detail, int err) {
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

  // Reaps a process that Kill() ended (its status is of no interest).
  void ReapQuietly() {
    siginfo_t info;
    std::memset(&info, 0, sizeof info);
    long rc;
    do {
      rc = ::syscall(SYS_waitid, P_PIDFD, pidfd_.get(), &info, WEXITED, nullptr);
    } while (rc != 0 && errno == EINTR);
    reaped_ = true;
  }

  // A zygote-born sandbox: waits (once) until its contain steps are done and
  // starts watching its seccomp listener. The sandbox is killed when they
  // failed; every later call gets the same error.
  Status EnsureContained() {
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

  // A zygote's clone runs its contain steps after the zygote answered: wait
  // for a report on the status pipe, "R" (from kiln-init: contained, the
  // program forked, its init in place) or "F" errno + "S" step (plan.failed_*
  // are set as a vfork'd child would set them). Non-OK when none came.
  Status AwaitContained(int status_fd, ChildPlan* plan) {
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

  Status WatchForViolations(int sock) {
    // Sent before the child's exec (and so before "R"): there without waiting.
    auto got = ReceiveWithFds(sock, 1, 1, MSG_DONTWAIT);
    if (!got.ok()) return got.status().WithContext("receiving the sandbox's seccomp listener");
    if (got->fds.size() != 1) return common::Internal("the sandbox sent no seccomp listener");
    UniqueFd listener = std::move(got->fds[0]);
    if (!shared_->violations) return common::Internal("no violation watcher");
    ASSIGN_OR_RETURN(violation_, shared_->violations->Add(std::move(listener), pidfd_.get()));
    return Status::Ok();
  }

  const std::string& failed_layer() const { return failed_layer_; }
  const std::string& failed_step() const { return failed_step_; }

  pid_t pid() const override { return pid_; }
  bool zygote_born() const override { return zygote_ != nullptr; }
  int exit_fd() const override { return pidfd_.get(); }
  const std::string& workspace_path() const override { return workspace_; }

  Status SetLimits(const SandboxLimits& limits) override {
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

  Status AddFiles(const std::vector<common::protocol::FileEntry>& files) override {
    return WriteWorkspaceFiles(workspace_, files, uid_, uid_);
  }

  StatusOr<CollectedFiles> CollectFiles(const std::vector<std::string>& patterns,
                                        uint64_t max_bytes) override {
    return ReadWorkspaceFiles(workspace_, patterns, max_bytes);
  }

  ExitStatus Usage() const override {
    ExitStatus st;
    if (cgroup_) {
      CgroupStats cs = cgroup_->Stats();
      if (cs.cpu_ms) st.cpu_ms = *cs.cpu_ms;
      if (cs.peak_bytes) st.max_rss_kb = *cs.peak_bytes / 1024;
      st.oom_killed = cs.oom_killed;
    }
    return st;
  }

  std::optional<uint64_t> MemoryBytes() const override {
    if (!cgroup_) return std::nullopt;
    return cgroup_->Stats().current_bytes;
  }

  void Interrupt() override {
    // Not yet reaped, so the pid (and the group it leads) cannot have been
    // reused.
    if (pid_ <= 0 || reaped_) return;
    ::kill(-pid_, SIGINT);
  }

  void Kill() override {
    if (pid_ <= 0 || reaped_) return;
    PidfdSendSignal(pidfd_.get(), SIGKILL);
    // Without a pid namespace the rest of the tree is not killed with pid 1.
    if (!shared_->Has("pid_ns") && cgroup_) cgroup_->KillAll();
    // A v1-frozen process dies of SIGKILL only once thawed.
    if (frozen_ && cgroup_) (void)cgroup_->Freeze(false);
  }

  Status Freeze(bool frozen) override {
    if (!cgroup_) return common::Unavailable("no cgroups: the sandbox cannot be frozen");
    if (pid_ <= 0 || reaped_) return common::Internal("no process");
    RETURN_IF_ERROR(EnsureContained());
    Status st = cgroup_->Freeze(frozen);
    // A failed freeze may have stopped some: counted as frozen, so Kill thaws.
    frozen_ = frozen || !st.ok();
    return st;
  }

  StatusOr<ExitStatus> Wait() override {
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

 private:
  std::shared_ptr<Shared> shared_;
  // The zygote this sandbox was forked from (its launcher thread is the
  // sandbox's parent): released after the sandbox is reaped.
  std::shared_ptr<Zygote> zygote_;
  // A zygote-born sandbox's contain steps may still run: EnsureContained().
  bool contained_ = true;
  Status setup_;               // their outcome, once known
  bool seccomp_ = false;       // the plan loads seccomp: a listener is coming
  UniqueFd pending_listener_;  // where it comes
  uint32_t uid_;
  UidLease uid_lease_;  // the host-wide hold on uid_, given back last
  std::string id_;
  std::string workspace_;
  bool workspace_mounted_ = false;
  std::unique_ptr<SandboxCgroup> cgroup_;
  pid_t pid_ = -1;
  UniqueFd pidfd_;
  bool reaped_ = false;
  std::string failed_layer_;
  std::string failed_step_;
  std::atomic<bool> frozen_{false};                     // Kill() may come from another thread
  std::unique_ptr<ViolationWatcher::Watch> violation_;  // dropped before shared_
  UniqueFd status_;     // kiln-init's reports (worker/init/main.cpp), non-blocking
  pid_t job_pid_ = -1;  // the program (kiln-init's child), as the host sees it
  std::string program_;
  InitReports reports_;  // from status_
  // The limits last applied, when applying them again would change nothing.
  std::optional<SandboxLimits> settled_limits_;

  // The program's host pid: kiln-init forks it as soon as it starts, so it
  // is init's child (the first; orphans join later). A fresh spawn may not
  // have forked yet: wait for it, up to kProgramWaitMs. -1 once pid 1 has
  // ended.
  pid_t ProgramPid() {
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
  static constexpr int kProgramWaitMs = 5000;
};

class LinuxSandbox final : public Sandbox {
 public:
  explicit LinuxSandbox(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}

  std::vector<std::string> ActiveLayers() const override {
    std::vector<std::string> out;
    for (const char* n : kLayerNames) {
      if (shared_->Has(n)) out.emplace_back(n);
    }
    return out;
  }

  const CgroupManager* cgroups() const override { return shared_->cgroups.get(); }

  StatusOr<std::unique_ptr<SandboxProcess>> Spawn(SpawnSpec spec) override {
    ASSIGN_OR_RETURN(auto proc, SpawnImpl(spec));
    return std::unique_ptr<SandboxProcess>(std::move(proc));
  }

  StatusOr<std::unique_ptr<LinuxSandboxProcess>> SpawnImpl(SpawnSpec& spec) {
    if (spec.argv.empty() || spec.argv[0].empty() || spec.argv[0][0] != '/') {
      return common::InvalidRequest("argv[0] must be an absolute path");
    }
    for (const std::string& e : spec.env) {
      if (e.find('=') == std::string::npos)
        return common::InvalidRequest("env entry '" + e + "' has no '='");
    }
    ASSIGN_OR_RETURN(UidLease uid, shared_->uids.Acquire());
    std::string id =
        std::to_string(::getpid()) + "-" + std::to_string(shared_->counter.fetch_add(1));
    auto proc = std::make_unique<LinuxSandboxProcess>(shared_, std::move(uid), id);
    Status st = proc->Start(spec);
    if (!st.ok()) {
      last_failed_layer_ = proc->failed_layer();
      last_failed_step_ = proc->failed_step();
      return st;
    }
    return proc;
  }

  std::string last_failed_layer_;
  std::string last_failed_step_;

 private:
  std::shared_ptr<Shared> shared_;
};

bool IsStaleName(const std::string& name) {
  size_t dash = name.find('-');
  if (dash == std::string::npos || dash == 0) return true;
  long pid = std::strtol(name.substr(0, dash).c_str(), nullptr, 10);
  if (pid <= 0) return true;
  if (pid == ::getpid()) return false;
  return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

std::string FindTrue() {
  for (const char* p : {"/usr/bin/true", "/bin/true"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return "";
}

}  // namespace

StatusOr<std::unique_ptr<Sandbox>> Sandbox::Create(const SandboxConfig& config) {
  if (config.isolation != "standard" && config.isolation != "gvisor") {
    return common::InvalidRequest("sandbox isolation must be standard or gvisor, got '" +
                                  config.isolation + "'");
  }
  if (config.state_dir.empty() || config.state_dir[0] != '/' || config.state_dir.back() == '/') {
    return common::InvalidRequest("sandbox state_dir must be an absolute path, got '" +
                                  config.state_dir + "'");
  }
  if (config.uid_count == 0 || config.uid_base == 0 ||
      config.uid_base + uint64_t{config.uid_count} > 0xfffffffeull) {
    return common::InvalidRequest("sandbox uid range is empty, includes root or overflows");
  }
  if (config.workspace_bytes == 0 || config.tmp_bytes == 0) {
    return common::InvalidRequest("workspace_bytes and tmp_bytes must be positive");
  }
  if (config.isolation == "gvisor") return CreateGvisorSandbox(config, IsStaleName);
  for (const std::string& l : config.relaxed_layers) {
    if (!IsKnownLayer(l))
      return common::InvalidRequest("unknown sandbox layer '" + l + "' in relaxed_layers");
  }
  auto shared = std::make_shared<Shared>(config);
  for (const char* n : kLayerNames) shared->layers.insert(n);

  // A missing layer: dropped when relaxed (and relaxable), else Create fails.
  auto missing = [&](const std::string& layer, const std::string& why) -> Status {
    if (config.relaxed_layers.count(layer) && IsRelaxableLayer(layer)) {
      shared->layers.erase(layer);
      return Status::Ok();
    }
    std::string msg = "sandbox layer '" + layer + "' is unavailable on this host: " + why;
    if (config.relaxed_layers.count(layer)) msg += " (this layer cannot be relaxed)";
    return common::Unavailable(msg);
  };

  for (const auto& [layer, why] : MissingWorkerPrivileges()) RETURN_IF_ERROR(missing(layer, why));
  RETURN_IF_ERROR(MakeDirs(config.state_dir, 0700));
  RETURN_IF_ERROR(MakeDirs(config.state_dir + "/ws", 0700));
  RETURN_IF_ERROR(MakeDirs(config.state_dir + "/root", 0700));
  if (config.uid_lock_dir.empty() || config.uid_lock_dir[0] != '/') {
    return common::InvalidRequest("sandbox uid_lock_dir must be an absolute path, got '" +
                                  config.uid_lock_dir + "'");
  }
  RETURN_IF_ERROR(MakeDirs(config.uid_lock_dir, 0700));

  for (const auto& [layer, why] : ProbeNamespaces()) {
    if (!why.empty()) RETURN_IF_ERROR(missing(layer, why));
  }
  int abi = LandlockAbi();
  if (abi <= 0) {
    RETURN_IF_ERROR(missing(
        "landlock", abi == 0 ? "the kernel has no Landlock (needs 5.13+ and lsm=landlock)"
                             : std::string("landlock_create_ruleset: ") + std::strerror(-abi)));
  }
  shared->landlock_abi = abi;
  if (Status st = ProbeSeccomp(); !st.ok()) {
    RETURN_IF_ERROR(missing("seccomp", st.message()));
  } else {
    auto prog = CompileSeccompFilters();
    if (!prog.ok()) {
      RETURN_IF_ERROR(missing("seccomp", prog.status().message()));
    } else if (auto watcher = ViolationWatcher::Start(); !watcher.ok()) {
      RETURN_IF_ERROR(missing("seccomp", watcher.status().message()));
    } else {
      shared->seccomp = std::move(*prog);
      shared->violations = std::move(*watcher);
    }
  }
  CgroupOptions cg{config.cgroup_mode, config.cgroup_prefix, config.cpu_millicores};
  auto manager = CgroupManager::Create(cg);
  if (!manager.ok()) {
    if (manager.status().code() == common::Code::kInvalidRequest) return manager.status();
    RETURN_IF_ERROR(missing("cgroups", manager.status().message()));
  } else {
    shared->cgroups = std::move(*manager);
  }
  auto layout = ProbeFilesystemLayout(config.state_dir, config.ro_binds);
  if (!layout.ok()) {
    if (layout.status().code() == common::Code::kInvalidRequest) return layout.status();
    RETURN_IF_ERROR(missing("filesystem", layout.status().message()));
  } else {
    shared->layout = std::move(*layout);
    ASSIGN_OR_RETURN(shared->layout.init_host_path, ResolveInitPath(config.init_path));
    const std::string& init = shared->layout.init_host_path;
    std::string library = init.substr(0, init.rfind('/') + 1) + "libkiln-zygote.so";
    if (config.zygote && ::access(library.c_str(), R_OK) == 0) {
      shared->zygote_library = library;
    } else if (config.zygote) {
      kLog.Warn({}, "no {}: every sandbox execs its program", library);
    }
  }

  // Leftovers of an earlier worker with the same state_dir and prefix.
  CleanupStaleWorkspaces(config.state_dir + "/ws", IsStaleName);
  if (shared->cgroups) shared->cgroups->CleanupStale(IsStaleName);

  auto sandbox = std::make_unique<LinuxSandbox>(shared);
  // End to end: every layer at once, on a trivial program.
  std::string true_path = FindTrue();
  if (true_path.empty()) return common::Unavailable("sandbox probe: no /usr/bin/true on this host");
  for (int attempt = 0; attempt < 8; ++attempt) {
    SpawnSpec probe;
    probe.argv = {true_path};
    auto proc = sandbox->SpawnImpl(probe);
    if (proc.ok()) {
      auto st = (*proc)->Wait();
      if (!st.ok()) return st.status().WithContext("sandbox probe");
      if (st->exit_code != 0) {
        return common::Unavailable("sandbox probe: " + true_path +
                                   " did not exit 0 inside the sandbox");
      }
      return std::unique_ptr<Sandbox>(std::move(sandbox));
    }
    std::string layer = sandbox->last_failed_layer_;
    if (layer.empty()) return proc.status().WithContext("sandbox probe");
    // Only `lo` would not come up: relaxing net_ns keeps the namespace (jobs
    // get no network at all) rather than putting jobs on the host's network.
    if (sandbox->last_failed_step_ == "loopback" && shared->loopback &&
        config.relaxed_layers.count("net_ns")) {
      shared->loopback = false;
      continue;
    }
    RETURN_IF_ERROR(missing(layer, proc.status().message()));
  }
  return common::Unavailable("sandbox probe kept failing");
}

}  // namespace kiln::worker::sandbox
