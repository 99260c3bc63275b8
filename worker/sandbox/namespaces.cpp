#include "worker/sandbox/namespaces.hpp"

#include <fcntl.h>
#include <net/if.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
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
int UnshareTimeAndExit(void*) { _exit(::unshare(CLONE_NEWTIME) == 0 ? 0 : errno); }

// Appends the decimal of v to buf at *at (no allocation, no locale).
void AppendDecimal(char* buf, size_t* at, long v) {
  char digits[24];
  int n = 0;
  unsigned long u = v < 0 ? -static_cast<unsigned long>(v) : static_cast<unsigned long>(v);
  do {
    digits[n++] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u != 0);
  if (v < 0) buf[(*at)++] = '-';
  while (n > 0) buf[(*at)++] = digits[--n];
}
}  // namespace

int ProbeTimeNamespace() {
  int pidfd = -1;
  pid_t pid = CloneVforked(0, UnshareTimeAndExit, nullptr, &pidfd);
  if (pid < 0) return -pid;
  siginfo_t info{};
  ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED);
  if (pidfd >= 0) ::close(pidfd);
  return info.si_code == CLD_EXITED ? info.si_status : EINVAL;
}

int EnterTimeNamespaceFromZero() {
  struct timespec mono, boot;
  if (::clock_gettime(CLOCK_MONOTONIC, &mono) != 0 || ::clock_gettime(CLOCK_BOOTTIME, &boot) != 0)
    return errno;
  if (::unshare(CLONE_NEWTIME) != 0) return errno;
  // Whole seconds only: the clocks start between 0 and 1 s, never negative.
  char buf[96];
  size_t n = 0;
  for (const char* c = "monotonic "; *c != '\0'; ++c) buf[n++] = *c;
  AppendDecimal(buf, &n, -static_cast<long>(mono.tv_sec));
  for (const char* c = " 0\nboottime "; *c != '\0'; ++c) buf[n++] = *c;
  AppendDecimal(buf, &n, -static_cast<long>(boot.tv_sec));
  for (const char* c = " 0\n"; *c != '\0'; ++c) buf[n++] = *c;
  int fd = ::open("/proc/self/timens_offsets", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  ssize_t w = ::write(fd, buf, n);
  int err = w == static_cast<ssize_t>(n) ? 0 : (w < 0 ? errno : EIO);
  ::close(fd);
  return err;
}

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
