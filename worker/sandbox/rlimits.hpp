// rlimits: CPU seconds, file size, open files, no core dumps, stack, and
// processes per uid (every sandbox has its own uid, so this is a second
// fence behind the pids cgroup).
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include "common/status.hpp"
#include "worker/sandbox/sandbox.hpp"

namespace kiln::worker::sandbox {

inline constexpr int kRlimitCount = 6;
struct RlimitSet {
  int resource[kRlimitCount];
  struct rlimit value[kRlimitCount];
};
// Parent side: the values for a spawn (clamped to the worker's own hard limits).
RlimitSet RlimitsFor(const SandboxLimits& limits);
// Child side.
int ApplyRlimits(const RlimitSet& set);
// Parent side, on a running (warm) sandbox: re-applies the job's limits to
// its pid 1 with prlimit. RLIMIT_CPU counts from now: the CPU the process has
// already used (the interpreter's start) is added. Limits can only be
// lowered (hard limits are clamped to the current ones). A worker holding
// CAP_SYS_RESOURCE (the usual root worker) calls prlimit itself; root
// without it (hosts whose capability bounding set drops it, as the
// development VM's does) calls it from the calling thread with that
// thread's real uid and gid switched to the sandbox's for the calls (a
// caller with the target's ids may lower its limits; this replaced a
// helper process that cost each job ~0.4 ms: docs/performance.md). True when every soft limit
// applied equals its hard one: the same limits applied again would change nothing.
common::StatusOr<bool> ApplyJobRlimits(pid_t pid, uid_t uid, gid_t gid,
                                       const SandboxLimits& limits);

}  // namespace kiln::worker::sandbox
