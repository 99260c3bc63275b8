// The standard level's internals, shared by its two halves and included by
// nothing else: linux_sandbox.cpp (the Sandbox: Sandbox::Create, its probes
// and the zygotes of Shared) and linux_sandbox_process.cpp (the
// SandboxProcess of one spawned sandbox: its start, teardown, limits, files
// and exit status). Shared lives as long as the Sandbox or any sandbox it
// spawned; a LinuxSandboxProcess is used as SandboxProcess describes.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "common/unique_fd.hpp"
#include "worker/sandbox/cgroups.hpp"
#include "worker/sandbox/contain.hpp"
#include "worker/sandbox/init_reports.hpp"
#include "worker/sandbox/mounts.hpp"
#include "worker/sandbox/sandbox.hpp"
#include "worker/sandbox/seccomp_policy.hpp"
#include "worker/sandbox/uid_pool.hpp"
#include "worker/sandbox/violation_watcher.hpp"
#include "worker/sandbox/zygote.hpp"

namespace kiln::worker::sandbox::linux_sandbox_internal {

using common::Status;
using common::StatusOr;
using common::UniqueFd;

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
                                    const std::vector<std::string>& env);

  Shared(const SandboxConfig& c) : config(c), uids(c.uid_base, c.uid_count, c.uid_lock_dir) {}
  bool Has(const char* layer) const { return layers.count(layer) != 0; }
};

class LinuxSandboxProcess final : public SandboxProcess {
 public:
  LinuxSandboxProcess(std::shared_ptr<Shared> shared, UidLease uid, std::string id)
      : shared_(std::move(shared)), uid_(uid.uid), uid_lease_(std::move(uid)), id_(std::move(id)) {
    workspace_ = shared_->config.state_dir + "/ws/" + id_;
  }
  ~LinuxSandboxProcess() override;

  Status Start(SpawnSpec& spec);

  Status SetupFailed(const char* step, const char* detail, int err);

  // Reaps a process that Kill() ended (its status is of no interest).
  void ReapQuietly();

  // A zygote-born sandbox: waits (once) until its contain steps are done and
  // starts watching its seccomp listener. The sandbox is killed when they
  // failed; every later call gets the same error.
  Status EnsureContained();

  // A zygote's clone runs its contain steps after the zygote answered: wait
  // for a report on the status pipe, "R" (from kiln-init: contained, the
  // program forked, its init in place) or "F" errno + "S" step (plan.failed_*
  // are set as a vfork'd child would set them). Non-OK when none came.
  Status AwaitContained(int status_fd, ChildPlan* plan);

  Status WatchForViolations(int sock);

  const std::string& failed_layer() const { return failed_layer_; }
  const std::string& failed_step() const { return failed_step_; }

  pid_t pid() const override { return pid_; }
  bool zygote_born() const override { return zygote_ != nullptr; }
  int exit_fd() const override { return pidfd_.get(); }
  const std::string& workspace_path() const override { return workspace_; }

  Status SetLimits(const SandboxLimits& limits) override;

  Status AddFiles(const std::vector<common::protocol::FileEntry>& files) override;

  StatusOr<CollectedFiles> CollectFiles(const std::vector<std::string>& patterns,
                                        uint64_t max_bytes) override;

  ExitStatus Usage() const override;

  double CpuMs() const override;
  std::optional<uint64_t> MemoryBytes() const override;

  void Interrupt() override;

  void Kill() override;

  Status Freeze(bool frozen) override;

  Status MountPackages(const std::string& host_dir) override;
  StatusOr<common::UniqueFd> ListenForEgress() override;

  StatusOr<ExitStatus> Wait() override;

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
  pid_t ProgramPid();
  static constexpr int kProgramWaitMs = 5000;
};

}  // namespace kiln::worker::sandbox::linux_sandbox_internal
