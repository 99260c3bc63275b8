// seccomp: a deny list over what untrusted code never needs, compiled once
// with libseccomp in Sandbox::Create() and loaded in the child as raw BPF
// (the child must not allocate).
//
// Actions:
//   SIGSYS (SECCOMP_RET_KILL_PROCESS) for calls no program has a reason to
//     make: kexec_load, kexec_file_load, reboot, init/finit/delete_module,
//     swapon/swapoff, and any foreign architecture (i386 int 0x80, x32). The
//     kernel logs these (audit type 1326 with the syscall number) and the
//     worker reports ExitStatus::seccomp_killed: that is the record of which
//     call was refused.
//   ENOSYS for io_uring_* (runtimes fall back to epoll/threads) and clone3
//     (glibc falls back to clone, whose flags are checked).
//   EPERM for the rest: mount family, pivot_root, chroot, ptrace and
//     process_vm_*, bpf, perf_event_open, keyrings, userfaultfd,
//     unshare/setns and clone with CLONE_NEW* flags, personality changes that
//     weaken ASLR, open_by_handle_at, syslog, acct, quotactl, clock setting,
//     hostname setting, TIOCSTI, fanotify.
//   EAFNOSUPPORT for AF_VSOCK sockets (not isolated by network namespaces).
#pragma once

#include <linux/filter.h>

#include <vector>

#include "common/status.hpp"

namespace kiln::worker::sandbox {

// Parent side: the filter as BPF instructions.
common::StatusOr<std::vector<sock_filter>> CompileSeccompFilter();
// Whether the kernel supports seccomp filters with SECCOMP_RET_KILL_PROCESS.
common::Status ProbeSeccomp();
// Child side: installs the filter (needs no_new_privs).
int LoadSeccompFilter(const sock_filter* filter, unsigned short count);

}  // namespace kiln::worker::sandbox
