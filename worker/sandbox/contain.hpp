// Contain: the child side of a spawn, one linear pipeline of fallible steps
// (after nsjail's containProc). Runs in the clone()d child, which shares the
// worker's memory until it execs: everything it needs is in a ChildPlan built
// by the parent; it allocates nothing, takes no locks and uses raw system
// calls. A failing step stores its name and errno in the plan and the child
// exits with 127; the parent reads them once clone() returns.
//
//   inherited descriptors → signals → join cgroups → cgroup namespace →
//   mount tree + pivot_root → hostname → loopback → time namespace →
//   descriptors → rlimits → uid/gid + capabilities → no_new_privs →
//   Landlock → seccomp → execve of kiln-init (worker/init), which forks the
//   program
//
// The child starts on the worker's descriptor table (CloneVforked shares it).
// Its first step takes a private copy and at once closes everything in it
// but the plan's own descriptors. A copy includes the worker's end of other
// sandboxes' stdin pipes, and a warm wrapper starts its job when its stdin
// reaches EOF, i.e. when every copy of that end is closed: held through the
// cgroup attach and pivot_root (RCU grace periods, 5-20 ms on a v1 host), a
// copy delayed the job running next to this spawn by as much
// (docs/performance.md, "Warm-job cost").
#pragma once

#include <linux/filter.h>
#include <sys/types.h>

#include "worker/sandbox/mounts.hpp"
#include "worker/sandbox/rlimits.hpp"

namespace kiln::worker::sandbox {

struct ChildPlan {
  // Reset every signal disposition to the default (an exec'd program gets
  // clean ones). A zygote-born child keeps the interpreter's own (zygote.hpp).
  bool reset_signals = true;
  // Layers in force (a relaxed, missing layer is skipped).
  bool join_cgroups = true, cgroup_ns = true, filesystem = true, uts_ns = true, net_ns = true,
       time_ns = true, landlock = true, seccomp = true;
  // Bring up `lo` in the new network namespace (false: the namespace stays,
  // with no interface up at all).
  bool loopback = true;
  const int* cgroup_fds = nullptr;  // cgroup.procs of each hierarchy
  int cgroup_fd_count = 0;
  const MountOp* mount_ops = nullptr;
  size_t mount_op_count = 0;
  const char* new_root = nullptr;
  const char* hostname = "kiln";
  RlimitSet rlimits{};
  int fds[4] = {-1, -1, -1, -1};  // become 0, 1, 2, 3; -1: /dev/null (0-2) or closed (3)
  int tool_fd = -1;               // becomes fd 6 (kept across exec); -1: closed
  uid_t uid = 0;
  gid_t gid = 0;
  int landlock_abi = 0;
  // The two seccomp filters, loaded in this order (seccomp_policy.hpp). The
  // first one's user-notification listener is sent to the worker over
  // notify_sock (a unix datagram socket), then closed in the child.
  int notify_sock = -1;
  // kiln-init's status pipe: becomes fd 5, kept across the exec into it.
  int status_fd = -1;
  const sock_filter* seccomp_filters[2] = {nullptr, nullptr};
  unsigned short seccomp_lens[2] = {0, 0};
  const char* const* argv = nullptr;
  const char* const* envp = nullptr;

  // Set by the child when a step fails.
  const char* failed_step = nullptr;
  const char* failed_detail = nullptr;
  int failed_errno = 0;
};

// The clone() entry point: arg is a ChildPlan*. Never returns.
int ContainAndExec(void* plan);

// Every step above but the execve: 0, or the errno of the step that failed
// (its name in p.failed_step). The zygote's child runs this, then forks the
// program instead of exec'ing it (zygote_child.cpp).
int RunContainSteps(ChildPlan& p);

// Steps by number, for a child that reports a failure over a pipe rather
// than in shared memory: the index of `step` (-1 if unknown), and the name
// of index i ("" if out of range). "execve" has kExecStepIndex.
inline constexpr int kExecStepIndex = 100;
int StepIndex(const char* step);
const char* StepName(int index);

// Closes every descriptor of the calling process except the `count` listed
// in `keep` (any order; negative entries and repeats are ignored; at most
// kMaxKeptFds). Raw system calls only, no allocation: callable in the
// clone()d child, once it has its own table. 0 or an errno.
inline constexpr int kMaxKeptFds = 16;
int CloseAllFdsExcept(const int* keep, int count);

// The layer a step belongs to (for "layer X is unavailable" messages), or "".
const char* LayerOfStep(const char* step);

}  // namespace kiln::worker::sandbox
