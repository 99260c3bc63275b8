#include "worker/sandbox/namespaces.hpp"

#include <net/if.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif

namespace kiln::worker::sandbox {

unsigned long NamespaceCloneFlags(const std::set<std::string>& layers) {
  unsigned long flags = 0;
  if (layers.count("pid_ns")) flags |= CLONE_NEWPID;
  if (layers.count("mount_ns")) flags |= CLONE_NEWNS;
  if (layers.count("net_ns")) flags |= CLONE_NEWNET;
  if (layers.count("ipc_ns")) flags |= CLONE_NEWIPC;
  if (layers.count("uts_ns")) flags |= CLONE_NEWUTS;
  return flags;
}

pid_t CloneVforked(unsigned long flags, int (*fn)(void*), void* arg, int* pidfd) {
  constexpr size_t kStackSize = 256 * 1024;
  void* stack = ::mmap(nullptr, kStackSize, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) return -errno;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  *pidfd = -1;
  pid_t pid = ::clone(
      fn, static_cast<char*>(stack) + kStackSize,
      static_cast<int>(CLONE_VM | CLONE_FILES | CLONE_VFORK | CLONE_PIDFD | flags | SIGCHLD), arg,
      pidfd);
  int err = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::munmap(stack, kStackSize);
  return pid < 0 ? -err : pid;
}

namespace {
int ExitAtOnce(void*) { _exit(0); }
}  // namespace

int ProbeNamespace(unsigned long clone_flag) {
  int pidfd = -1;
  pid_t pid = CloneVforked(clone_flag, ExitAtOnce, nullptr, &pidfd);
  if (pid < 0) return -pid;
  siginfo_t info{};
  ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED);
  if (pidfd >= 0) ::close(pidfd);
  return 0;
}

int SetHostname(const char* name) {
  return ::sethostname(name, std::strlen(name)) == 0 ? 0 : errno;
}

int BringUpLoopback() {
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  struct ifreq req;
  std::memset(&req, 0, sizeof req);
  std::memcpy(req.ifr_name, "lo", 3);
  int rc = ::ioctl(fd, SIOCGIFFLAGS, &req);
  if (rc == 0) {
    req.ifr_flags = static_cast<short>(req.ifr_flags | IFF_UP | IFF_RUNNING);
    rc = ::ioctl(fd, SIOCSIFFLAGS, &req);
  }
  int err = rc == 0 ? 0 : errno;
  ::close(fd);
  return err;
}

int EnterCgroupNamespace() { return ::unshare(CLONE_NEWCGROUP) == 0 ? 0 : errno; }

}  // namespace kiln::worker::sandbox
