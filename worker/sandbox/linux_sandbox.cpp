// Sandbox and SandboxProcess on Linux: the parent side of every layer.
//
// Spawn: take a uid, mount the host workspace tmpfs, create the cgroup(s),
// build the ChildPlan (all strings and the mount list), then clone() with
// CLONE_VM | CLONE_VFORK and the namespace flags. The child joins its cgroups
// by itself, so the parent needs no sync pipe; clone() returns once the child
// has exec'd kiln-init (worker/init), which forks the program, or failed (the
// plan says where).
//
// This file: Sandbox::Create (its checks, the probes of every layer, the
// end-to-end probe), LinuxSandbox and the zygotes of Shared. One spawned
// sandbox, LinuxSandboxProcess, is in linux_sandbox_process.cpp; both
// share linux_sandbox_internal.hpp.
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "common/log/logging.hpp"
#include "worker/sandbox/cgroups.hpp"
#include "worker/sandbox/contain.hpp"
#include "worker/sandbox/fs_util.hpp"
#include "worker/sandbox/gvisor_sandbox.hpp"
#include "worker/sandbox/host_probe.hpp"
#include "worker/sandbox/landlock.hpp"
#include "worker/sandbox/linux_sandbox_internal.hpp"
#include "worker/sandbox/mounts.hpp"
#include "worker/sandbox/namespaces.hpp"
#include "worker/sandbox/sandbox.hpp"
#include "worker/sandbox/seccomp_policy.hpp"
#include "worker/sandbox/violation_watcher.hpp"
#include "worker/sandbox/workspace.hpp"
#include "worker/sandbox/zygote.hpp"

namespace kiln::worker::sandbox {
namespace {

using common::Status;
using common::StatusOr;
using common::UniqueFd;

const common::SubsystemLog kLog("sandbox");

// A zygote that died before serving anyone is not started again for this
// long: its sandboxes are exec'd meanwhile.
constexpr auto kZygoteRetry = std::chrono::seconds(30);

}  // namespace

namespace linux_sandbox_internal {

std::shared_ptr<Zygote> Shared::ZygoteFor(const std::vector<std::string>& argv,
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

}  // namespace linux_sandbox_internal

namespace {

using linux_sandbox_internal::LinuxSandboxProcess;
using linux_sandbox_internal::Shared;

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
  auto layout = ProbeFilesystemLayout(config.state_dir, config.ro_binds, config.node_modules);
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