// seccomp: an allowlist of system calls, compiled once with libseccomp in
// Sandbox::Create() and loaded in the child as raw BPF (the child must not
// allocate). The tables and the reasons for each entry are in
// seccomp_policy.cpp and docs/security.md ("seccomp policy"); callers: the
// sandbox (compile, load) and the policy's unit test.
//
// Two stacked filters, because libseccomp cannot say "allow this call except
// for these argument values" in one (an unconditional allow swallows every
// conditional refusal of the same call):
//   1. syscalls: which calls exist at all. Allowed, EPERM (privileged
//      operations, named so programs get an ordinary error), the kill list
//      (calls with no legitimate use: kexec, modules, reboot, swap, any
//      foreign architecture), handed to the worker's listener, which kills
//      the whole sandbox (violation_watcher.hpp), and ENOSYS for every call
//      not named — what a kernel without the call answers, which every
//      library already falls back from.
//   2. arguments: refusals by argument value on calls the first filter
//      allows (socket families, netlink protocols, clone's namespace flags,
//      personality bits, TCP_ULP, TIOCSTI). Default allow.
// The kernel runs both on every call and the stricter verdict wins (an errno
// beats allow; with equal actions the later filter's errno).
//
// Argument comparisons are on the low 32 bits where the kernel reads an
// `int` (it truncates the register): a refused value with high bits set is
// refused all the same.
#pragma once

#include <linux/filter.h>

#include <vector>

#include "common/status.hpp"

namespace kiln::worker::sandbox {

// Filter 1 as a table: every named call and its action (for tests and docs).
enum class SyscallAction { kAllow, kPerm, kNoSys, kKill, kSucceedWithoutEffect };
struct SyscallRule {
  const char* name;
  SyscallAction action;
};
std::vector<SyscallRule> SyscallTable();

struct SeccompFilters {
  std::vector<sock_filter> syscalls;
  std::vector<sock_filter> arguments;
};

// Parent side: both filters as BPF instructions.
common::StatusOr<SeccompFilters> CompileSeccompFilters();
// Whether the kernel supports seccomp user notification (the kill list).
common::Status ProbeSeccomp();
// Child side: installs one filter (needs no_new_privs). With `listener`, the
// filter gets a user-notification listener, stored there (close-on-exec).
// 0 or an errno.
int LoadSeccompFilter(const sock_filter* filter, unsigned short count, int* listener = nullptr);

}  // namespace kiln::worker::sandbox
