// Sandbox: starts a program inside every isolation layer Kiln has, and owns it.
//
//   ASSIGN_OR_RETURN(auto sandbox, Sandbox::Create(config));   // probes the host
//   ASSIGN_OR_RETURN(auto proc, sandbox->Spawn(std::move(spec)));
//
// Layers (docs/security.md): pid, mount, net, ipc, uts and cgroup namespaces;
// a minimal read-only filesystem view with a size-capped tmpfs workspace
// (/workspace, the working directory) and /tmp; loopback-only network; an
// unprivileged uid/gid with no capabilities and no_new_privs; Landlock
// (writes only in /workspace and /tmp); a seccomp filter; cgroup limits
// (memory without swap, pids, cpu; v2 or v1); rlimits. The spawned program is
// pid 1 of its pid namespace, so when it ends, everything it started ends.
//
// A process may be spawned before its job is known (a warm sandbox): the job's
// limits are applied with SetLimits() and its files with AddFiles() once the
// job arrives; neither needs the process to cooperate.
//
// Threads: Sandbox::Spawn may be called from any thread concurrently. A
// SandboxProcess belongs to one thread at a time.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/protocol/messages.hpp"
#include "common/status.hpp"
#include "common/unique_fd.hpp"
#include "worker/sandbox/workspace.hpp"

namespace kiln::worker::sandbox {

// Names of the layers, as reported by ActiveLayers() and accepted in
// SandboxConfig::relaxed_layers.
inline constexpr const char* kLayerNames[] = {
    "user_ids",     "pid_ns",    "mount_ns", "net_ns",     "ipc_ns",
    "uts_ns",       "cgroup_ns", "time_ns",  "filesystem", "no_new_privs",
    "capabilities", "landlock",  "seccomp",  "cgroups",    "rlimits"};

// The gVisor isolation level (SandboxConfig::isolation == "gvisor").
struct GvisorConfig {
  std::string runsc = "/usr/bin/runsc";
  std::string platform = "ptrace";  // ptrace works everywhere; kvm needs /dev/kvm
  // Added to every sandbox's cgroup limits: the second kernel (Sentry,
  // gofer) lives in the job's cgroup with the job.
  uint64_t memory_overhead_bytes = 192ull << 20;
  uint32_t pids_overhead = 4096;
  uint32_t start_timeout_ms = 20000;  // runsc run until kiln-init has connected
};

struct SandboxConfig {
  // "standard": this host's kernel behind every layer below; "gvisor": each
  // sandbox also runs on gVisor's user-space kernel (gvisor_sandbox.hpp).
  std::string isolation = "standard";
  GvisorConfig gvisor;
  std::string state_dir = "/run/kiln";  // host folder for workspaces
  std::string cgroup_mode = "auto";     // "auto", "v1" or "v2"
  std::string cgroup_prefix = "kiln";   // our own sub-tree in every hierarchy
  uint32_t uid_base = 200000;           // sandboxes run as uid/gid base..base+count-1
  uint32_t uid_count = 1000;
  // Host-wide: a live sandbox holds an flock on <uid_lock_dir>/<uid>, so two
  // workers (or clusters) on one host whose ranges overlap never run two
  // sandboxes as one uid. Every worker on a host must use the same folder.
  std::string uid_lock_dir = "/run/kiln-uids";
  // The sandbox's pid 1 (worker/init); empty: kiln-init next to the running
  // executable (/proc/self/exe).
  std::string init_path;
  std::vector<std::string> ro_binds;  // extra host paths bound read-only
  // A node_modules tree (the javascript package set) the sandboxes see,
  // read-only, at /node_modules, where both `require` and `import` of a bare
  // name look last. Empty, or missing on the host: none.
  std::string node_modules;
  uint64_t workspace_bytes = 64ull << 20;
  uint64_t tmp_bytes = 64ull << 20;
  uint32_t cpu_millicores = 1000;  // cgroup CPU cap per sandbox (1000 = one core)
  // Spawns that name a zygote (SpawnSpec::zygote_argv) are forked from it
  // (zygote.hpp); false: every sandbox execs its program.
  bool zygote = true;
  // Layers that may be missing on this host without refusing to start. Only
  // an operator's explicit config puts names here.
  std::set<std::string> relaxed_layers;
};

struct SandboxLimits {
  uint64_t memory_bytes = 256ull << 20;  // cgroup memory limit, no swap
  uint32_t max_pids = 64;                // cgroup pids limit
  uint64_t cpu_ms = 30000;               // RLIMIT_CPU (rounded up to seconds)
  uint64_t file_size_bytes = 64ull << 20;
  uint32_t open_files = 256;
  bool operator==(const SandboxLimits&) const = default;
};

struct SpawnSpec {
  std::vector<std::string> argv;  // argv[0] is an absolute path
  std::vector<std::string> env;   // "KEY=VALUE": the whole environment
  SandboxLimits limits;
  // Child ends installed as fds 0, 1, 2 and 3 (control channel); all other
  // descriptors are closed. control_fd may be invalid (then fd 3 is closed).
  common::UniqueFd stdin_fd, stdout_fd, stderr_fd, control_fd;
  // The tool channel (docs/api.md, "Tool callbacks"): installed as fd 6,
  // inherited by everything the program starts; invalid: fd 6 is closed.
  common::UniqueFd tool_fd;
  // The sandbox will be frozen between uses (a session): on cgroup v1 it
  // also joins the freezer hierarchy.
  bool freezable = false;
  // When set (and the sandbox allows zygotes), the program is not exec'd:
  // a zygote started once with this argv (and `env`), which has loaded the
  // same program, forks it into the sandbox with every layer argv would
  // get (zygote.hpp). If the zygote cannot serve, argv is exec'd instead.
  std::vector<std::string> zygote_argv;
};

struct ExitStatus {
  std::optional<int> exit_code;  // set when the program exited
  std::optional<int> signal;     // set when a signal killed it
  double cpu_ms = 0;             // user + system, the whole sandbox
  uint64_t max_rss_kb = 0;       // peak memory of the whole sandbox
  bool oom_killed = false;       // the memory limit was hit
  // A process of the sandbox made a call from the seccomp kill list and the
  // worker killed the sandbox; `violation` names the call.
  bool seccomp_killed = false;
  std::string violation;
};

class SandboxProcess {
 public:
  virtual ~SandboxProcess() = default;  // kills, reaps, removes cgroup and workspace

  virtual pid_t pid() const = 0;
  // Readable once the process has exited (a pidfd); for poll/epoll.
  virtual int exit_fd() const = 0;
  // The workspace as the worker sees it on the host (valid until destruction).
  virtual const std::string& workspace_path() const = 0;

  // Tightens or sets the limits of a running, not yet started job.
  virtual common::Status SetLimits(const SandboxLimits& limits) = 0;
  // Writes files into the workspace, owned by the sandbox uid. Paths must be
  // relative and stay inside the workspace.
  virtual common::Status AddFiles(const std::vector<common::protocol::FileEntry>& files) = 0;
  // Reads back workspace files matching glob patterns, at most max_bytes and
  // protocol::kMaxFiles files in all; says what it left out (workspace.hpp).
  virtual common::StatusOr<CollectedFiles> CollectFiles(const std::vector<std::string>& patterns,
                                                        uint64_t max_bytes) = 0;

  // Resource use so far (cpu_ms, max_rss_kb, oom_killed; exit fields unset),
  // read from the cgroup without reaping: lets a job end before the kernel
  // has torn the sandbox down.
  virtual ExitStatus Usage() const = 0;
  // Usage().cpu_ms alone (one file read instead of four): the execution
  // loop's CPU-limit check and a session statement's starting point.
  virtual double CpuMs() const = 0;
  // Memory charged to the sandbox now (cgroup), if the host reports it.
  virtual std::optional<uint64_t> MemoryBytes() const = 0;
  // SIGINT to every process of the sandbox (its pid 1 leads their process
  // group): a session's running code is interrupted, its driver survives.
  virtual void Interrupt() = 0;
  // SIGKILL to the sandbox's pid 1: every process of the sandbox dies.
  virtual void Kill() = 0;
  // Stops (true) or resumes (false) every process of the sandbox; returns
  // once all are stopped. Stopped processes use no CPU; Kill() still works.
  // Needs the cgroups layer and, on v1, a spawn with `freezable`.
  virtual common::Status Freeze(bool frozen) = 0;
  // Whether SetLimits works on a frozen sandbox (the worker applies them
  // itself). False where a process inside must take them (gVisor's init).
  virtual bool LimitsWhileFrozen() const { return true; }
  // Reaps the process; blocks until it has exited. Call once.
  virtual common::StatusOr<ExitStatus> Wait() = 0;
  // Mounts the host folder `host_dir` read-only (nosuid, nodev) at
  // /packages in the sandbox, replacing whatever was mounted there; the
  // program sees it from its next file lookup on. A level without it
  // (gVisor) answers PACKAGE_INSTALL_FAILED.
  virtual common::Status MountPackages(const std::string& host_dir) {
    (void)host_dir;
    return common::Status(common::Code::kPackageInstallFailed,
                          "packages on request are not available at this isolation level");
  }
  // Network on request: a listening socket on 127.0.0.1:kSandboxProxyPort
  // in the sandbox's own network namespace (sandbox/netns_listener.hpp), for
  // the worker's egress gateway to serve. UNAVAILABLE where the sandbox has
  // no network namespace of its own (its network would be the host's) or at
  // a level without it (gVisor).
  virtual common::StatusOr<common::UniqueFd> ListenForEgress() {
    return common::Status(common::Code::kUnavailable,
                          "network on request is not available at this isolation level");
  }
  // Forked from a zygote (SpawnSpec::zygote_argv) rather than exec'd.
  virtual bool zygote_born() const { return false; }
};

class CgroupManager;

class Sandbox {
 public:
  virtual ~Sandbox() = default;

  // config.isolation picks the level. Standard:
  // checks that the host provides every layer not relaxed in the config and
  // prepares what every spawn shares (the compiled seccomp filter, the cgroup
  // parent). Fails naming the first missing layer and why.
  static common::StatusOr<std::unique_ptr<Sandbox>> Create(const SandboxConfig& config);

  virtual std::vector<std::string> ActiveLayers() const = 0;
  // The cgroups every spawn lives under (their usage all together:
  // CgroupManager::Usage); null when the cgroups layer is relaxed away.
  virtual const CgroupManager* cgroups() const = 0;
  virtual common::StatusOr<std::unique_ptr<SandboxProcess>> Spawn(SpawnSpec spec) = 0;
};

}  // namespace kiln::worker::sandbox
