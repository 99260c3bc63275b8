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

const char* const kKill[] = {"kexec_load",    "kexec_file_load", "reboot",
                             "init_module",   "finit_module",    "delete_module",
                             "create_module", "swapon",          "swapoff"};
const char* const kNoSys[] = {"io_uring_setup", "io_uring_enter", "io_uring_register", "clone3"};
const char* const kPerm[] = {"mount",
                             "umount",
                             "umount2",
                             "pivot_root",
                             "chroot",
                             "fsopen",
                             "fsconfig",
                             "fsmount",
                             "fspick",
                             "move_mount",
                             "open_tree",
                             "mount_setattr",
                             "ptrace",
                             "process_vm_readv",
                             "process_vm_writev",
                             "kcmp",
                             "pidfd_getfd",
                             "bpf",
                             "perf_event_open",
                             "keyctl",
                             "add_key",
                             "request_key",
                             "userfaultfd",
                             "unshare",
                             "setns",
                             "open_by_handle_at",
                             "name_to_handle_at",
                             "syslog",
                             "acct",
                             "quotactl",
                             "quotactl_fd",
                             "settimeofday",
                             "clock_settime",
                             "clock_adjtime",
                             "adjtimex",
                             "sethostname",
                             "setdomainname",
                             "lookup_dcookie",
                             "nfsservctl",
                             "vhangup",
                             "uselib",
                             "_sysctl",
                             "fanotify_init",
                             "iopl",
                             "ioperm",
                             "get_kernel_syms",
                             "query_module",
                             "vm86",
                             "vm86old"};
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
constexpr int kAfVsock = 40;

struct CtxDeleter {
  void operator()(scmp_filter_ctx c) const { seccomp_release(c); }
};

Status Add(scmp_filter_ctx ctx, uint32_t action, const char* name, unsigned n = 0,
           const scmp_arg_cmp* cmp = nullptr) {
  int nr = seccomp_syscall_resolve_name(name);
  if (nr == __NR_SCMP_ERROR) return Status::Ok();  // not on this architecture
  int rc = seccomp_rule_add_array(ctx, action, nr, n, cmp);
  if (rc != 0) return common::ErrnoStatus(std::string("seccomp rule for ") + name, -rc);
  return Status::Ok();
}

}  // namespace

StatusOr<std::vector<sock_filter>> CompileSeccompFilter() {
  std::unique_ptr<void, CtxDeleter> ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (!ctx) return common::Internal("seccomp_init failed");
  scmp_filter_ctx c = ctx.get();
  // Foreign architectures (i386 via int 0x80, x32) end the process.
  if (seccomp_attr_set(c, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS) != 0 ||
      seccomp_attr_set(c, SCMP_FLTATR_CTL_NNP, 0) != 0) {
    return common::Internal("seccomp_attr_set failed");
  }
  for (const char* n : kKill) RETURN_IF_ERROR(Add(c, SCMP_ACT_KILL_PROCESS, n));
  for (const char* n : kNoSys) RETURN_IF_ERROR(Add(c, SCMP_ACT_ERRNO(ENOSYS), n));
  for (const char* n : kPerm) RETURN_IF_ERROR(Add(c, SCMP_ACT_ERRNO(EPERM), n));
  for (uint64_t flag : kCloneNamespaceFlags) {
    scmp_arg_cmp cmp = SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag);
    RETURN_IF_ERROR(Add(c, SCMP_ACT_ERRNO(EPERM), "clone", 1, &cmp));
  }
  for (uint64_t flag : kPersonalityUnsafe) {
    scmp_arg_cmp cmp = SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag);
    RETURN_IF_ERROR(Add(c, SCMP_ACT_ERRNO(EPERM), "personality", 1, &cmp));
  }
  {
    scmp_arg_cmp cmp = SCMP_A0(SCMP_CMP_EQ, kAfVsock);
    RETURN_IF_ERROR(Add(c, SCMP_ACT_ERRNO(EAFNOSUPPORT), "socket", 1, &cmp));
    scmp_arg_cmp sti = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCSTI);
    RETURN_IF_ERROR(Add(c, SCMP_ACT_ERRNO(EPERM), "ioctl", 1, &sti));
  }
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

Status ProbeSeccomp() {
  uint32_t action = SECCOMP_RET_KILL_PROCESS;
  if (::syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action) != 0) {
    return common::ErrnoStatus("seccomp(SECCOMP_GET_ACTION_AVAIL, KILL_PROCESS)", errno);
  }
  return Status::Ok();
}

int LoadSeccompFilter(const sock_filter* filter, unsigned short count) {
  struct sock_fprog prog = {count, const_cast<sock_filter*>(filter)};
  return ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) == 0 ? 0 : errno;
}

}  // namespace kiln::worker::sandbox
