#include "worker/sandbox/seccomp_policy.hpp"

#include <linux/seccomp.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include "common/unique_fd.hpp"

namespace kiln::worker::sandbox {
namespace {

using common::Status;
using common::StatusOr;

// ------------------------------------------------------------ filter 1

// What ordinary programs (the runtimes, coreutils, compilers, numpy, node's
// libuv) call. Docker's default profile is the starting point; the
// differences are argued in docs/security.md. One table for every runtime: a
// job of any language can exec any interpreter in the image, so a
// per-runtime table would be as wide as their union.
const char* const kAllow[] = {
    // processes, threads, signals
    "arch_prctl", "clone", "execve", "execveat", "exit", "exit_group", "fork", "vfork", "wait4",
    "waitid", "kill", "tgkill", "tkill", "pidfd_open", "pidfd_send_signal", "getpid", "getppid",
    "gettid", "getpgid", "setpgid", "getpgrp", "getsid", "setsid", "set_tid_address",
    "get_robust_list", "set_robust_list", "rseq", "rt_sigaction", "rt_sigpending", "rt_sigprocmask",
    "rt_sigqueueinfo", "rt_tgsigqueueinfo", "rt_sigreturn", "rt_sigsuspend", "rt_sigtimedwait",
    "sigaltstack", "signalfd", "signalfd4", "pause", "restart_syscall", "prctl", "personality",
    "seccomp", "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
    // ids and limits (no capabilities: a process can only keep or drop its own)
    "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups", "setuid",
    "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups", "setfsuid", "setfsgid",
    "capget", "capset", "getrlimit", "setrlimit", "prlimit64", "getrusage", "times", "getpriority",
    "setpriority", "ioprio_get", "ioprio_set", "umask", "uname", "sysinfo", "getcpu",
    // scheduling (real-time classes need RLIMIT_RTPRIO, which is 0)
    "sched_yield", "sched_getaffinity", "sched_setaffinity", "sched_getattr", "sched_setattr",
    "sched_getparam", "sched_setparam", "sched_getscheduler", "sched_setscheduler",
    "sched_get_priority_max", "sched_get_priority_min", "sched_rr_get_interval",
    // memory
    "brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "mincore", "msync", "mlock", "mlock2",
    "mlockall", "munlock", "munlockall", "membarrier", "memfd_create", "pkey_alloc", "pkey_free",
    "pkey_mprotect", "map_shadow_stack", "mseal",
    // time and randomness
    "getrandom", "clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep", "gettimeofday",
    "time", "alarm", "getitimer", "setitimer", "timer_create", "timer_delete", "timer_getoverrun",
    "timer_gettime", "timer_settime", "timerfd_create", "timerfd_gettime", "timerfd_settime",
    // synchronisation
    "futex", "futex_waitv", "futex_wait", "futex_wake", "futex_requeue",
    // descriptors and I/O
    "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2",
    "pwritev2", "lseek", "close", "close_range", "dup", "dup2", "dup3", "fcntl", "ioctl", "pipe",
    "pipe2", "splice", "tee", "sendfile", "copy_file_range", "readahead", "fadvise64", "poll",
    "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait",
    "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "inotify_init", "inotify_init1",
    "inotify_add_watch", "inotify_rm_watch", "flock", "fsync", "fdatasync", "syncfs",
    "sync_file_range", "cachestat",
    // files and directories (Landlock and the mounts decide where)
    "open", "openat", "openat2", "creat", "stat", "fstat", "lstat", "newfstatat", "statx", "statfs",
    "fstatfs", "access", "faccessat", "faccessat2", "getdents", "getdents64", "getcwd", "chdir",
    "fchdir", "mkdir", "mkdirat", "rmdir", "unlink", "unlinkat", "rename", "renameat", "renameat2",
    "link", "linkat", "symlink", "symlinkat", "readlink", "readlinkat", "mknod", "mknodat",
    "truncate", "ftruncate", "fallocate", "chmod", "fchmod", "fchmodat", "fchmodat2", "chown",
    "fchown", "fchownat", "lchown", "utime", "utimes", "utimensat", "futimesat", "getxattr",
    "lgetxattr", "fgetxattr", "setxattr", "lsetxattr", "fsetxattr", "listxattr", "llistxattr",
    "flistxattr", "removexattr", "lremovexattr", "fremovexattr",
    // sockets (families and options narrowed by filter 2)
    "socket", "socketpair", "bind", "listen", "accept", "accept4", "connect", "getsockname",
    "getpeername", "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg", "shutdown",
    "getsockopt", "setsockopt",
    // SysV and POSIX IPC: private to the job's IPC namespace
    "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semtimedop", "semctl", "shmget",
    "shmat", "shmdt", "shmctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive",
    "mq_notify", "mq_getsetattr"};

// Privileged or host-wide operations: refused with an ordinary error.
const char* const kPerm[] = {
    // the mount API and the root
    "mount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount", "fspick",
    "move_mount", "open_tree", "mount_setattr", "statmount", "listmount",
    // other processes' memory and descriptors
    "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "kcmp", "pidfd_getfd",
    // kernel interfaces with a history of local privilege escalation
    "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key", "modify_ldt",
    "vmsplice", "fanotify_init", "fanotify_mark",
    // namespaces
    "unshare", "setns",
    // file handles bypass path-based checks
    "open_by_handle_at", "name_to_handle_at",
    // host-wide state
    "syslog", "acct", "quotactl", "quotactl_fd", "settimeofday", "clock_settime", "clock_adjtime",
    "adjtimex", "sethostname", "setdomainname", "vhangup", "iopl", "ioperm", "lookup_dcookie"};

// Named only so the tests and the docs pin them: they get the default.
// io_uring and legacy AIO are large kernel surfaces every runtime falls back
// from; clone3 passes its flags in memory where seccomp cannot read them
// (glibc falls back to clone, whose flags filter 2 checks).
const char* const kNoSys[] = {"io_uring_setup", "io_uring_enter", "io_uring_register",
                              "clone3",         "io_setup",       "io_destroy",
                              "io_submit",      "io_cancel",      "io_getevents",
                              "io_pgetevents",  "memfd_secret",   "remap_file_pages"};

// No legitimate use: the worker kills the whole sandbox and the result names
// the call (violation_watcher.hpp).
const char* const kKill[] = {"kexec_load",    "kexec_file_load", "reboot",
                             "init_module",   "finit_module",    "delete_module",
                             "create_module", "swapon",          "swapoff"};

// sync() flushes every filesystem of the host; a job's writable filesystems
// are all tmpfs, so there is nothing of its own to flush: it returns 0.
const char* const kSucceedWithoutEffect[] = {"sync"};

// ------------------------------------------------------------ filter 2

constexpr uint64_t kLow32 = 0xffffffffu;
constexpr int kAfMax = 46;  // AF_MAX of Linux 6.x; larger values are refused too
constexpr int kAllowedFamilies[] = {1 /*UNIX*/, 2 /*INET*/, 10 /*INET6*/, 16 /*NETLINK*/};
constexpr int kAfNetlink = 16;
constexpr int kNetlinkRoute = 0;
constexpr int kNetlinkMaxProtocol = 31;
constexpr int kSolTcp = 6, kTcpUlp = 31;
constexpr unsigned long kTiocLinux = 0x541C;
constexpr uint64_t kCloneNamespaceFlags[] = {0x00020000 /*NEWNS*/,
                                             0x02000000 /*NEWCGROUP*/,
                                             0x04000000 /*NEWUTS*/,
                                             0x08000000 /*NEWIPC*/,
                                             0x10000000 /*NEWUSER*/,
                                             0x20000000 /*NEWPID*/,
                                             0x40000000 /*NEWNET*/};
constexpr uint64_t kPersonalityUnsafe[] = {
    0x0040000 /*ADDR_NO_RANDOMIZE*/, 0x0400000 /*READ_IMPLIES_EXEC*/, 0x0100000 /*MMAP_PAGE_ZERO*/,
    0x0200000 /*ADDR_COMPAT_LAYOUT*/};

struct CtxDeleter {
  void operator()(scmp_filter_ctx c) const { seccomp_release(c); }
};
using Ctx = std::unique_ptr<void, CtxDeleter>;

Status Add(scmp_filter_ctx ctx, uint32_t action, const char* name,
           std::initializer_list<scmp_arg_cmp> cmp = {}) {
  int nr = seccomp_syscall_resolve_name(name);
  if (nr == __NR_SCMP_ERROR) return Status::Ok();  // unknown to this libseccomp or architecture
  int rc = seccomp_rule_add_array(ctx, action, nr, static_cast<unsigned>(cmp.size()), cmp.begin());
  if (rc != 0) return common::ErrnoStatus(std::string("seccomp rule for ") + name, -rc);
  return Status::Ok();
}

StatusOr<Ctx> NewContext(uint32_t default_action, uint32_t bad_arch_action) {
  Ctx ctx(seccomp_init(default_action));
  if (!ctx) return common::Internal("seccomp_init failed");
  if (seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, bad_arch_action) != 0 ||
      seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_NNP, 0) != 0 ||
      seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_OPTIMIZE, 2) != 0) {
    return common::Internal("seccomp_attr_set failed");
  }
  return ctx;
}

uint32_t LibseccompAction(SyscallAction a) {
  switch (a) {
    case SyscallAction::kAllow:
      return SCMP_ACT_ALLOW;
    case SyscallAction::kPerm:
      return SCMP_ACT_ERRNO(EPERM);
    case SyscallAction::kNoSys:
      return SCMP_ACT_ERRNO(ENOSYS);
    case SyscallAction::kKill:
      return SCMP_ACT_NOTIFY;  // the worker kills the sandbox (violation_watcher.hpp)
    case SyscallAction::kSucceedWithoutEffect:
      return SCMP_ACT_ERRNO(0);
  }
  return SCMP_ACT_KILL_PROCESS;
}

StatusOr<Ctx> SyscallFilter() {
  // Foreign architectures (i386 via int 0x80, x32) go to the kill list.
  ASSIGN_OR_RETURN(Ctx ctx, NewContext(SCMP_ACT_ERRNO(ENOSYS), SCMP_ACT_NOTIFY));
  for (const SyscallRule& r : SyscallTable()) {
    if (r.action == SyscallAction::kNoSys) continue;  // the default (libseccomp refuses a rule)
    RETURN_IF_ERROR(Add(ctx.get(), LibseccompAction(r.action), r.name));
  }
  return ctx;
}

// Refuses every socket family but kAllowedFamilies for `call` (socket or
// socketpair): each other value of the low 32 bits, and anything larger.
Status RefuseFamilies(scmp_filter_ctx c, const char* call) {
  for (int af = 0; af < kAfMax; ++af) {
    bool allowed = false;
    for (int ok : kAllowedFamilies) allowed |= af == ok;
    if (allowed) continue;
    RETURN_IF_ERROR(Add(c, SCMP_ACT_ERRNO(EAFNOSUPPORT), call,
                        {SCMP_A0(SCMP_CMP_MASKED_EQ, kLow32, static_cast<uint64_t>(af))}));
  }
  return Add(c, SCMP_ACT_ERRNO(EAFNOSUPPORT), call, {SCMP_A0(SCMP_CMP_GE, kAfMax)});
}

StatusOr<Ctx> ArgumentFilter() {
  // A foreign architecture is filter 1's to report (a kill here would win).
  ASSIGN_OR_RETURN(Ctx ctx, NewContext(SCMP_ACT_ALLOW, SCMP_ACT_ALLOW));
  scmp_filter_ctx c = ctx.get();
  RETURN_IF_ERROR(RefuseFamilies(c, "socket"));
  RETURN_IF_ERROR(RefuseFamilies(c, "socketpair"));
  // Netlink: routing only (what `ip addr`, getifaddrs() and resolvers use);
  // no uevents, audit, sock_diag, netfilter, crypto, generic families.
  for (int proto = 0; proto <= kNetlinkMaxProtocol; ++proto) {
    if (proto == kNetlinkRoute) continue;
    RETURN_IF_ERROR(Add(c, SCMP_ACT_ERRNO(EPROTONOSUPPORT), "socket",
                        {SCMP_A0(SCMP_CMP_MASKED_EQ, kLow32, kAfNetlink),
                         SCMP_A2(SCMP_CMP_MASKED_EQ, kLow32, static_cast<uint64_t>(proto))}));
  }
  RETURN_IF_ERROR(Add(c, SCMP_ACT_ERRNO(EPROTONOSUPPORT), "socket",
                      {SCMP_A0(SCMP_CMP_MASKED_EQ, kLow32, kAfNetlink),
                       SCMP_A2(SCMP_CMP_GT, kNetlinkMaxProtocol)}));
  // Upper-layer protocols on TCP sockets (kernel TLS and its module).
  RETURN_IF_ERROR(Add(c, SCMP_ACT_ERRNO(EPERM), "setsockopt",
                      {SCMP_A1(SCMP_CMP_MASKED_EQ, kLow32, kSolTcp),
                       SCMP_A2(SCMP_CMP_MASKED_EQ, kLow32, kTcpUlp)}));
  // Faking terminal input or poking the console.
  for (unsigned long request : {static_cast<unsigned long>(TIOCSTI), kTiocLinux}) {
    RETURN_IF_ERROR(
        Add(c, SCMP_ACT_ERRNO(EPERM), "ioctl", {SCMP_A1(SCMP_CMP_MASKED_EQ, kLow32, request)}));
  }
  for (uint64_t flag : kCloneNamespaceFlags) {
    RETURN_IF_ERROR(
        Add(c, SCMP_ACT_ERRNO(EPERM), "clone", {SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag)}));
  }
  // Personalities that weaken ASLR or map page zero.
  for (uint64_t flag : kPersonalityUnsafe) {
    RETURN_IF_ERROR(
        Add(c, SCMP_ACT_ERRNO(EPERM), "personality", {SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag)}));
  }
  return ctx;
}

StatusOr<std::vector<sock_filter>> Export(scmp_filter_ctx c) {
  common::UniqueFd mem(::memfd_create("kiln-seccomp", MFD_CLOEXEC));
  if (!mem.valid()) return common::ErrnoStatus("memfd_create", errno);
  int rc = seccomp_export_bpf(c, mem.get());
  if (rc != 0) return common::ErrnoStatus("seccomp_export_bpf", -rc);
  off_t size = ::lseek(mem.get(), 0, SEEK_END);
  if (size <= 0 || size % sizeof(sock_filter) != 0 || size / sizeof(sock_filter) > BPF_MAXINSNS) {
    return common::Internal("seccomp filter has a bad size");
  }
  std::vector<sock_filter> prog(static_cast<size_t>(size) / sizeof(sock_filter));
  if (::pread(mem.get(), prog.data(), static_cast<size_t>(size), 0) != size) {
    return common::ErrnoStatus("reading the seccomp filter", errno);
  }
  return prog;
}

}  // namespace

std::vector<SyscallRule> SyscallTable() {
  std::vector<SyscallRule> t;
  auto add = [&t](const auto& names, SyscallAction a) {
    for (const char* n : names) t.push_back({n, a});
  };
  add(kAllow, SyscallAction::kAllow);
  add(kPerm, SyscallAction::kPerm);
  add(kNoSys, SyscallAction::kNoSys);
  add(kKill, SyscallAction::kKill);
  add(kSucceedWithoutEffect, SyscallAction::kSucceedWithoutEffect);
  return t;
}

StatusOr<SeccompFilters> CompileSeccompFilters() {
  SeccompFilters out;
  ASSIGN_OR_RETURN(Ctx syscalls, SyscallFilter());
  ASSIGN_OR_RETURN(out.syscalls, Export(syscalls.get()));
  ASSIGN_OR_RETURN(Ctx arguments, ArgumentFilter());
  ASSIGN_OR_RETURN(out.arguments, Export(arguments.get()));
  return out;
}

Status ProbeSeccomp() {
  uint32_t action = SECCOMP_RET_USER_NOTIF;
  if (::syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action) != 0) {
    return common::ErrnoStatus("seccomp(SECCOMP_GET_ACTION_AVAIL, USER_NOTIF) (Linux 5.0+)", errno);
  }
  return Status::Ok();
}

int LoadSeccompFilter(const sock_filter* filter, unsigned short count, int* listener) {
  struct sock_fprog prog = {count, const_cast<sock_filter*>(filter)};
  unsigned flags = listener != nullptr ? SECCOMP_FILTER_FLAG_NEW_LISTENER : 0;
  long rc = ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog);
  if (rc < 0) return errno;
  if (listener != nullptr) *listener = static_cast<int>(rc);
  return 0;
}

}  // namespace kiln::worker::sandbox
