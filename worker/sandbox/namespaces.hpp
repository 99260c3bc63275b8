// Namespaces: which clone flags a sandbox gets, the vfork-style clone that
// starts the child, and the child-side steps inside the new namespaces.
//
// No user namespace: the worker is root (or holds CAP_SYS_ADMIN, CAP_SETUID,
// CAP_SETGID...) on its host, so the child sets up the mount tree as root in
// the initial user namespace and then drops to an unprivileged host uid with
// no capabilities at all. That keeps the kernel's user-namespace attack
// surface (unprivileged mounts, nested namespaces) closed to the job.
#pragma once

#include <sys/types.h>

#include <set>
#include <string>

namespace kiln::worker::sandbox {

// Parent side ---------------------------------------------------------------

// CLONE_NEW* flags for the active layers (cgroup_ns is unshared later by the
// child, once it has joined its cgroups).
unsigned long NamespaceCloneFlags(const std::set<std::string>& layers);

// clone(CLONE_VM | CLONE_FILES | CLONE_VFORK | CLONE_PIDFD | flags | SIGCHLD):
// runs fn(arg) on `stack` in the child, sharing the parent's memory and
// descriptor table; returns once the child has exec'd or exited. All signals
// are blocked in the calling thread around the call. Returns the pid (or
// -errno) and stores the pidfd.
//
// The table is shared, not copied, so that the child holds no reference to
// the worker's descriptors while it waits for a CPU: a copy would keep, say,
// another job's stdin open after the worker closed it (contain.hpp). fn must
// therefore not open, close or dup anything before unshare(CLONE_FILES).
pid_t CloneVforked(unsigned long flags, int (*fn)(void*), void* arg, int* pidfd);

// Checks that a namespace of this kind can be created: clones a child with
// just that flag, which exits at once. 0 or the errno.
int ProbeNamespace(unsigned long clone_flag);
// The same for a time namespace, which clone() cannot create (its flag is
// one of clone's signal bits): a child unshares one. 0 or the errno.
int ProbeTimeNamespace();

// Child side (no allocation, no locks) --------------------------------------

int SetHostname(const char* name);  // in the new UTS namespace
int BringUpLoopback();              // `lo` up in the new network namespace
int EnterCgroupNamespace();         // unshare(CLONE_NEWCGROUP)
// A new time namespace whose CLOCK_MONOTONIC and CLOCK_BOOTTIME start near
// zero, entered at execve (so /proc/uptime and /proc/stat's btime show the
// sandbox's age, not the host's). Needs /proc of the new pid namespace
// mounted and CAP_SYS_ADMIN (before the uid change).
int EnterTimeNamespaceFromZero();

}  // namespace kiln::worker::sandbox
