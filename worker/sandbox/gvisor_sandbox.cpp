// Sandbox and SandboxProcess at the gVisor level (sandbox.hpp,
// SandboxConfig::isolation == "gvisor"): every job runs on gVisor's
// user-space kernel (runsc), so its system calls never reach the host's.
//
// Spawn: take a uid, mount the host workspace tmpfs (as the standard level
// does), write an OCI bundle (gvisor_spec.hpp) into <state_dir>/gvisor/<id>,
// listen on <bundle>/ctl/s, create the cgroup, and start `runsc run` in it:
// runsc, its Sentry and its gofer all live in the sandbox's cgroup (runsc
// runs with --ignore-cgroups), so the memory, pids and CPU limits and
// KillAll cover the second kernel too (sessions pause with runsc: Freeze). kiln-init (--connect)
// connects once: that connection is its status channel, and over it the
// worker sends the job's stdin, stdout, stderr and control pipe ends
// (SCM_RIGHTS; gVisor imports them). Spawn returns once they are sent; the
// socket is then removed, so nothing else can connect. runsc's own stdio is
// /dev/null: gVisor would hold descriptors passed that way until the whole
// sandbox ends, so their EOF would come ~30 ms after the job's.
#include "worker/sandbox/gvisor_sandbox.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "common/log/logging.hpp"
#include "worker/sandbox/cgroups.hpp"
#include "worker/sandbox/contain.hpp"
#include "worker/sandbox/fd_passing.hpp"
#include "worker/sandbox/fs_util.hpp"
#include "worker/sandbox/gvisor_runsc.hpp"
#include "worker/sandbox/gvisor_spec.hpp"
#include "worker/sandbox/init_reports.hpp"
#include "worker/sandbox/mounts.hpp"
#include "worker/sandbox/namespaces.hpp"
#include "worker/sandbox/rlimits.hpp"
#include "worker/sandbox/uid_pool.hpp"
#include "worker/sandbox/workspace.hpp"

namespace kiln::worker::sandbox {
namespace {

using common::Status;
using common::StatusOr;
using common::UniqueFd;

const common::SubsystemLog kLog("gvisor");

// What the gVisor level enforces, inside its own kernel or around it.
const char* const kGvisorLayers[] = {"gvisor",       "user_ids",     "pid_ns",  "mount_ns",
                                     "net_ns",       "ipc_ns",       "uts_ns",  "filesystem",
                                     "no_new_privs", "capabilities", "cgroups", "rlimits"};

struct GvShared {
  SandboxConfig config;
  std::unique_ptr<CgroupManager> cgroups;
  FilesystemLayout layout;
  UidPool uids;
  std::string compat_lib;  // libkiln-gvisor-compat.so on the host
  std::string dir;         // <state_dir>/gvisor: one bundle per sandbox
  std::string runsc_root;  // runsc's own state (--root)
  std::atomic<uint64_t> counter{0};
  explicit GvShared(const SandboxConfig& c)
      : config(c), uids(c.uid_base, c.uid_count, c.uid_lock_dir) {}

  // runsc's global flags, then `args`.
  std::vector<std::string> Runsc(std::initializer_list<std::string> args) const {
    std::vector<std::string> v = {
        config.gvisor.runsc, "--root=" + runsc_root, "--platform=" + config.gvisor.platform,
        "--network=none",    "--host-uds=open",      "--ignore-cgroups"};
    v.insert(v.end(), args);
    return v;
  }
};

StatusOr<UniqueFd> Listen(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) {
    return common::InvalidRequest("gVisor control socket path too long: " + path +
                                  " (use a shorter sandbox.state_dir)");
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  UniqueFd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!s.valid()) return common::ErrnoStatus("socket", errno);
  if (::bind(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return common::ErrnoStatus("bind " + path, errno);
  }
  if (::chmod(path.c_str(), 0666) != 0) return common::ErrnoStatus("chmod " + path, errno);
  if (::listen(s.get(), 1) != 0) return common::ErrnoStatus("listen " + path, errno);
  return s;
}

class GvisorProcess final : public SandboxProcess {
 public:
  GvisorProcess(std::shared_ptr<GvShared> shared, UidLease uid, std::string id)
      : shared_(std::move(shared)), uid_(uid.uid), uid_lease_(std::move(uid)), id_(std::move(id)) {
    workspace_ = shared_->config.state_dir + "/ws/" + id_;
    bundle_ = shared_->dir + "/" + id_;
  }
  ~GvisorProcess() override {
    if (pid_ > 0 && !reaped_) {
      Kill();
      (void)Wait();
    }
    if (cgroup_) {
      cgroup_->KillAll();
      (void)cgroup_->Destroy();
    }
    RemoveLeftovers(*shared_, id_);
    if (workspace_mounted_) UnmountWorkspace(workspace_);
    shared_->uids.Release(std::move(uid_lease_));
  }

  // Everything a sandbox <id> leaves on the host besides its cgroup and
  // workspace: its bundle and runsc's state (kept when runsc was killed).
  static void RemoveLeftovers(const GvShared& shared, const std::string& id) {
    std::error_code ec;
    std::filesystem::remove_all(shared.dir + "/" + id, ec);
    // runsc names them "<sandbox id>_sandbox:<container id>.state" (and .lock).
    const std::string prefix = id + "_sandbox:";
    for (const auto& e : std::filesystem::directory_iterator(shared.runsc_root, ec)) {
      if (e.path().filename().string().rfind(prefix, 0) == 0) {
        std::filesystem::remove_all(e.path(), ec);
      }
    }
  }

  Status Start(SpawnSpec& spec) {
    const SandboxConfig& cfg = shared_->config;
    program_ = spec.argv[0];
    if (::access(program_.c_str(), X_OK) != 0) return CannotExecute(program_, errno);
    RETURN_IF_ERROR(
        MountWorkspace(workspace_, cfg.workspace_bytes, uid_, uid_).WithContext("workspace"));
    workspace_mounted_ = true;
    RETURN_IF_ERROR(WriteBundle(spec));
    const std::string socket_path = bundle_ + "/ctl/s";
    ASSIGN_OR_RETURN(UniqueFd listener, Listen(socket_path));

    // Not freezable: a session is paused through runsc (Freeze).
    ASSIGN_OR_RETURN(cgroup_, shared_->cgroups->CreateFor(id_, WithOverhead(spec.limits),
                                                          /*freezable=*/false));
    std::vector<int> cg_fds;
    for (const UniqueFd& fd : cgroup_->join_fds()) cg_fds.push_back(fd.get());

    const std::string log = bundle_ + "/runsc.log";
    std::vector<std::string> args =
        shared_->Runsc({"--log=" + log, "run", "--bundle=" + bundle_, id_});
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    char* envp[] = {const_cast<char*>("PATH=/usr/sbin:/usr/bin:/sbin:/bin"), nullptr};
    RunscPlan plan;
    plan.path = argv[0];
    plan.argv = argv.data();
    plan.envp = envp;
    UniqueFd null(::open("/dev/null", O_RDWR | O_CLOEXEC));
    if (!null.valid()) return common::ErrnoStatus("open /dev/null", errno);
    plan.stdio[0] = plan.stdio[1] = plan.stdio[2] = null.get();
    plan.cgroup_fds = cg_fds.data();
    plan.cgroup_fd_count = static_cast<int>(cg_fds.size());
    int pidfd = -1;
    pid_t pid = CloneVforked(0, StartRunsc, &plan, &pidfd);
    if (pid < 0) return common::ErrnoStatus("starting runsc", -pid);
    pid_ = pid;
    pidfd_.Reset(pidfd);

    // kiln-init connects once (worker/init/main.cpp) and is sent the job's fds.
    UniqueFd conn;
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(cfg.gvisor.start_timeout_ms);
    while (!conn.valid()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0) {
        Kill();
        (void)Wait();
        return common::Unavailable("the gVisor sandbox did not start within " +
                                   std::to_string(cfg.gvisor.start_timeout_ms) +
                                   " ms; runsc log: " + LogTail(log));
      }
      pollfd pfds[2] = {{listener.get(), POLLIN, 0}, {pidfd_.get(), POLLIN, 0}};
      int rc = ::poll(pfds, 2, static_cast<int>(left));
      if (rc < 0 && errno != EINTR) return common::ErrnoStatus("poll", errno);
      if (rc > 0 && (pfds[0].revents & POLLIN)) {
        conn.Reset(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
        continue;
      }
      if (rc > 0 && pfds[1].revents) {
        auto st = Wait();
        std::string how = st.ok() && st->exit_code ? "exit " + std::to_string(*st->exit_code)
                          : st.ok() && st->signal  ? "signal " + std::to_string(*st->signal)
                                                   : "ended";
        return common::Unavailable("the gVisor sandbox ended before its init connected (runsc " +
                                   how + "); runsc log: " + LogTail(log));
      }
    }
    ::unlink(socket_path.c_str());
    std::vector<int> fds = {spec.stdin_fd.get(), spec.stdout_fd.get(), spec.stderr_fd.get()};
    if (spec.control_fd.valid()) fds.push_back(spec.control_fd.get());
    // A reopen (/dev/stdin, /proc/self/fd/N) is checked against the pipe's
    // mode; gVisor shows the worker's uid as nobody, so only "other" bits
    // can allow it, as the job's reopen succeeds at the standard level.
    // (A pipe has no path: its mode matters for nothing else.)
    for (int fd : fds) {
      if (::fchmod(fd, 0666) != 0) return common::ErrnoStatus("fchmod the job's pipes", errno);
    }
    // kiln-init installs a fifth as fd 6, after the control channel.
    if (spec.control_fd.valid() && spec.tool_fd.valid()) fds.push_back(spec.tool_fd.get());
    RETURN_IF_ERROR(SendWithFds(conn.get(), "F", fds)
                        .WithContext("passing the job's descriptors into the gVisor sandbox"));
    status_ = std::move(conn);
    return Status::Ok();
  }

  pid_t pid() const override { return pid_; }
  int exit_fd() const override { return pidfd_.get(); }
  const std::string& workspace_path() const override { return workspace_; }

  Status SetLimits(const SandboxLimits& limits) override {
    if (reaped_) return common::InvalidRequest("the sandbox has already exited");
    RETURN_IF_ERROR(cgroup_->SetLimits(WithOverhead(limits)));
    reports_.ReadFrom(status_.get());
    if (reports_.exec_errno != 0) return CannotExecute(program_, reports_.exec_errno);
    // It has already ended: nothing left to limit.
    if (reports_.program_status) return Status::Ok();
    return SendRlimits(limits);
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
    CgroupStats cs = cgroup_->Stats(stats::kCpu | stats::kPeak | stats::kOom);
    if (cs.cpu_ms) st.cpu_ms = *cs.cpu_ms;
    if (cs.peak_bytes) st.max_rss_kb = *cs.peak_bytes / 1024;
    st.oom_killed = cs.oom_killed;
    return st;
  }

  double CpuMs() const override { return cgroup_->Stats(stats::kCpu).cpu_ms.value_or(0); }

  std::optional<uint64_t> MemoryBytes() const override {
    return cgroup_->Stats(stats::kCurrent).current_bytes;
  }

  void Interrupt() override {
    if (pid_ <= 0 || reaped_) return;
    // To the sandbox's pid 1 (kiln-init), which passes it to its group.
    (void)RunRunsc(shared_->Runsc({"kill", id_, "INT"}));
  }

  void Kill() override {
    if (pid_ <= 0 || reaped_) return;
    // runsc, its Sentry and gofer: the whole second kernel, paused or not.
    cgroup_->KillAll();
  }

  // gVisor's own pause (every task of its kernel stopped where it is), not
  // the cgroup freezer: freezing the ptrace platform's tracer and tracees
  // under it now and then left a guest task SIGKILLed at the thaw (1 run
  // in 5 of the sessions tests). The Sentry itself is idle while paused.
  // The rlimits go to kiln-init inside, which a paused sandbox cannot answer.
  bool LimitsWhileFrozen() const override { return false; }

  Status Freeze(bool frozen) override {
    if (pid_ <= 0 || reaped_) return common::Internal("no process");
    if (frozen == paused_) return Status::Ok();
    RETURN_IF_ERROR(RunRunsc(shared_->Runsc({frozen ? "pause" : "resume", id_})));
    paused_ = frozen;
    return Status::Ok();
  }

  StatusOr<ExitStatus> Wait() override {
    if (pid_ <= 0) return common::Internal("no process");
    if (reaped_) return common::InvalidRequest("Wait() called twice");
    siginfo_t info;
    std::memset(&info, 0, sizeof info);
    long rc;
    do {
      rc = ::syscall(SYS_waitid, P_PIDFD, pidfd_.get(), &info, WEXITED, nullptr);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) return common::ErrnoStatus("waitid on runsc", errno);
    reaped_ = true;
    // The rest of the second kernel goes with runsc (a killed runsc may
    // leave its Sentry behind).
    cgroup_->KillAll();
    ExitStatus st = Usage();  // the cgroup's figures: runsc's rusage is not the job's
    if (info.si_code == CLD_EXITED) {
      st.exit_code = info.si_status;
    } else {
      st.signal = info.si_status;
    }
    reports_.ReadFrom(status_.get());
    reports_.ApplyTo(&st);
    return st;
  }

 private:
  std::shared_ptr<GvShared> shared_;
  uint32_t uid_;
  UidLease uid_lease_;
  std::string id_;
  std::string workspace_;
  std::string bundle_;
  bool workspace_mounted_ = false;
  std::unique_ptr<SandboxCgroup> cgroup_;
  pid_t pid_ = -1;
  UniqueFd pidfd_;
  bool reaped_ = false;
  bool paused_ = false;  // by Freeze(true), until Freeze(false)
  UniqueFd status_;      // kiln-init's reports, non-blocking
  std::string program_;  // argv[0]
  InitReports reports_;  // from status_

  // The job's limits plus what the second kernel itself needs: its memory
  // (Sentry, gofer) and its threads count against the same cgroup.
  SandboxLimits WithOverhead(SandboxLimits l) const {
    l.memory_bytes += shared_->config.gvisor.memory_overhead_bytes;
    l.max_pids += shared_->config.gvisor.pids_overhead;
    return l;
  }

  // The job's rlimits, set on the program by kiln-init inside gVisor's
  // kernel (the host's prlimit cannot reach there); returns once applied.
  Status SendRlimits(const SandboxLimits& limits) {
    const RlimitSet set = RlimitsFor(limits);
    std::string rec = "L";
    for (int i = 0; i < kRlimitCount; ++i) {
      int32_t resource = set.resource[i];
      uint64_t soft = set.value[i].rlim_cur, hard = set.value[i].rlim_max;
      rec.append(reinterpret_cast<const char*>(&resource), 4);
      rec.append(reinterpret_cast<const char*>(&soft), 8);
      rec.append(reinterpret_cast<const char*>(&hard), 8);
    }
    if (::send(status_.get(), rec.data(), rec.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(rec.size())) {
      return common::ErrnoStatus("sending the job's limits to the sandbox", errno);
    }
    reports_.limits_ack.reset();
    const auto deadline = std::chrono::steady_clock::now() + kLimitsAckTimeout;
    while (!reports_.limits_ack && !reports_.program_status) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0) return common::Internal("the sandbox's init did not apply the job's limits");
      pollfd pfd{status_.get(), POLLIN, 0};
      if (::poll(&pfd, 1, static_cast<int>(left)) < 0 && errno != EINTR) {
        return common::ErrnoStatus("poll", errno);
      }
      if (pfd.revents & (POLLHUP | POLLERR)) break;
      reports_.ReadFrom(status_.get());
    }
    if (reports_.limits_ack && *reports_.limits_ack != 0) {
      return common::ErrnoStatus("prlimit on the job's program", *reports_.limits_ack);
    }
    return Status::Ok();
  }
  static constexpr std::chrono::milliseconds kLimitsAckTimeout{5000};

  // <bundle>/config.json, the read-only root (symlinks, mount points, the
  // generated /etc files) and the control socket's folder.
  Status WriteBundle(const SpawnSpec& spec) {
    const SandboxConfig& cfg = shared_->config;
    const std::string root = bundle_ + "/rootfs";
    // Open inside (the sandbox uid connects); on the host, state_dir is 0700.
    RETURN_IF_ERROR(MakeDirs(bundle_ + "/ctl", 0755));
    RETURN_IF_ERROR(MakeDirs(root + "/etc", 0755));
    auto write = [](const std::string& path, std::string_view text, mode_t mode) -> Status {
      UniqueFd fd(
          ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode));
      if (!fd.valid()) return common::ErrnoStatus("create " + path, errno);
      if (!text.empty() &&
          ::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
        return common::ErrnoStatus("write " + path, errno);
      }
      return Status::Ok();
    };
    auto touch = [&](const std::string& path, mode_t mode) { return write(path, "", mode); };
    for (const HostEntry& e : shared_->layout.entries) {
      std::string at = root + e.path;
      RETURN_IF_ERROR(MakeDirs(at.substr(0, at.rfind('/')), 0755));
      if (e.kind == HostEntry::kSymlink) {
        if (::symlink(e.link_target.c_str(), at.c_str()) != 0 && errno != EEXIST) {
          return common::ErrnoStatus("symlink " + at, errno);
        }
      } else if (e.kind == HostEntry::kDir) {
        RETURN_IF_ERROR(MakeDirs(at, 0755));
      } else {
        RETURN_IF_ERROR(touch(at, 0644));
      }
    }
    for (const char* d : {"/workspace", "/tmp", "/proc", "/dev", "/sys", kGvisorControlDir}) {
      RETURN_IF_ERROR(MakeDirs(root + d, 0755));
    }
    RETURN_IF_ERROR(touch(root + kSandboxInitPath, 0755));
    RETURN_IF_ERROR(touch(root + kGvisorCompatLib, 0644));
    RETURN_IF_ERROR(write(root + "/etc/ld.so.preload", std::string(kGvisorCompatLib) + "\n", 0644));
    const std::string u = std::to_string(uid_);
    RETURN_IF_ERROR(
        write(root + "/etc/passwd",
              "root:x:0:0:root:/nonexistent:/usr/sbin/nologin\nsandbox:x:" + u + ":" + u +
                  ":sandbox:/workspace:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/"
                  "nologin\n",
              0644));
    RETURN_IF_ERROR(
        write(root + "/etc/group", "root:x:0:\nsandbox:x:" + u + ":\nnogroup:x:65534:\n", 0644));
    RETURN_IF_ERROR(write(root + "/etc/hosts",
                          "127.0.0.1\tlocalhost kiln\n::1\tlocalhost ip6-localhost ip6-loopback\n",
                          0644));
    RETURN_IF_ERROR(write(root + "/etc/hostname", "kiln\n", 0644));

    GvisorSpecInput in;
    in.rootfs = root;
    in.entries = shared_->layout.entries;
    in.init_host_path = shared_->layout.init_host_path;
    in.compat_lib_host = shared_->compat_lib;
    in.workspace_host = workspace_;
    in.control_dir_host = bundle_ + "/ctl";
    in.tmp_bytes = cfg.tmp_bytes;
    in.uid = in.gid = uid_;
    in.argv = {kSandboxInitPath, "--connect", std::string(kGvisorControlDir) + "/s"};
    in.argv.insert(in.argv.end(), spec.argv.begin(), spec.argv.end());
    in.env = spec.env;
    in.rlimits = RlimitsFor(spec.limits);
    return write(bundle_ + "/config.json", BuildGvisorSpec(in).dump(), 0600);
  }
};

class GvisorSandbox final : public Sandbox {
 public:
  explicit GvisorSandbox(std::shared_ptr<GvShared> shared) : shared_(std::move(shared)) {}

  std::vector<std::string> ActiveLayers() const override {
    return {std::begin(kGvisorLayers), std::end(kGvisorLayers)};
  }
  const CgroupManager* cgroups() const override { return shared_->cgroups.get(); }

  StatusOr<std::unique_ptr<SandboxProcess>> Spawn(SpawnSpec spec) override {
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
    auto proc = std::make_unique<GvisorProcess>(shared_, std::move(uid), id);
    RETURN_IF_ERROR(proc->Start(spec));
    return std::unique_ptr<SandboxProcess>(std::move(proc));
  }

 private:
  std::shared_ptr<GvShared> shared_;
};

}  // namespace

StatusOr<std::unique_ptr<Sandbox>> CreateGvisorSandbox(
    const SandboxConfig& config, const std::function<bool(const std::string&)>& is_stale) {
  const GvisorConfig& gv = config.gvisor;
  if (gv.runsc.empty() || gv.runsc[0] != '/' || ::access(gv.runsc.c_str(), X_OK) != 0) {
    return common::Unavailable("isolation level gvisor needs runsc at '" + gv.runsc +
                               "' (Debian: apt install runsc; or set sandbox.gvisor.runsc)");
  }
  if (gv.platform != "ptrace" && gv.platform != "kvm" && gv.platform != "systrap") {
    return common::InvalidRequest("sandbox.gvisor.platform must be ptrace, kvm or systrap, got '" +
                                  gv.platform + "'");
  }
  if (!config.relaxed_layers.empty()) {
    return common::InvalidRequest(
        "sandbox.relax does not apply to isolation level gvisor: every layer is required");
  }
  auto shared = std::make_shared<GvShared>(config);
  shared->dir = config.state_dir + "/gvisor";
  shared->runsc_root = shared->dir + "/runsc";
  RETURN_IF_ERROR(MakeDirs(config.state_dir + "/ws", 0700));
  RETURN_IF_ERROR(MakeDirs(shared->runsc_root, 0700));
  RETURN_IF_ERROR(MakeDirs(config.uid_lock_dir, 0700));
  CgroupOptions cg{config.cgroup_mode, config.cgroup_prefix, config.cpu_millicores};
  auto manager = CgroupManager::Create(cg);
  if (!manager.ok()) return manager.status().WithContext("isolation level gvisor needs cgroups");
  shared->cgroups = std::move(*manager);
  ASSIGN_OR_RETURN(shared->layout,
                   ProbeFilesystemLayout(config.state_dir, config.ro_binds, config.node_modules));
  ASSIGN_OR_RETURN(shared->layout.init_host_path, ResolveInitPath(config.init_path));
  const std::string& init = shared->layout.init_host_path;
  shared->compat_lib = init.substr(0, init.rfind('/')) + "/libkiln-gvisor-compat.so";
  if (::access(shared->compat_lib.c_str(), R_OK) != 0) {
    return common::Unavailable("isolation level gvisor needs " + shared->compat_lib +
                               " next to kiln-init (build the kiln-gvisor-compat target)");
  }

  // Leftovers of an earlier worker with the same state_dir and prefix.
  CleanupStaleWorkspaces(config.state_dir + "/ws", is_stale);
  shared->cgroups->CleanupStale(is_stale);
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(shared->dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name != "runsc" && is_stale(name)) GvisorProcess::RemoveLeftovers(*shared, name);
  }

  auto sandbox = std::make_unique<GvisorSandbox>(shared);
  // End to end: the second kernel boots and runs a trivial program.
  SpawnSpec probe;
  probe.argv = {"/usr/bin/true"};
  UniqueFd null(::open("/dev/null", O_RDWR | O_CLOEXEC));
  for (UniqueFd* fd : {&probe.stdin_fd, &probe.stdout_fd, &probe.stderr_fd}) {
    fd->Reset(::fcntl(null.get(), F_DUPFD_CLOEXEC, 3));
  }
  auto proc = sandbox->Spawn(std::move(probe));
  if (!proc.ok()) return proc.status().WithContext("gVisor sandbox probe");
  auto st = (*proc)->Wait();
  if (!st.ok()) return st.status().WithContext("gVisor sandbox probe");
  if (st->exit_code != 0) {
    return common::Unavailable("gVisor sandbox probe: /usr/bin/true did not exit 0");
  }
  kLog.Info({}, "isolation level gvisor: runsc {} (platform {})", gv.runsc, gv.platform);
  return std::unique_ptr<Sandbox>(std::move(sandbox));
}

}  // namespace kiln::worker::sandbox
