#include "worker/sandbox/contain.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "worker/sandbox/credentials.hpp"
#include "worker/sandbox/landlock.hpp"
#include "worker/sandbox/namespaces.hpp"
#include "worker/sandbox/seccomp_policy.hpp"

namespace kiln::worker::sandbox {
namespace {

// Every step: 0 or an errno. `detail` may name a path.
using StepFn = int (*)(ChildPlan& p, const char** detail);

// A private descriptor table holding only the plan's descriptors: see
// contain.hpp for why this is the first step.
int CloseInherited(ChildPlan& p, const char**) {
  if (::unshare(CLONE_FILES) != 0) return errno;
  int keep[kMaxKeptFds];
  int n = 0;
  for (int fd : p.fds) {
    if (n == kMaxKeptFds) return EMFILE;
    keep[n++] = fd;
  }
  for (int i = 0; i < p.cgroup_fd_count; ++i) {
    if (n == kMaxKeptFds) return EMFILE;
    keep[n++] = p.cgroup_fds[i];
  }
  if (n + 3 > kMaxKeptFds) return EMFILE;
  keep[n++] = p.notify_sock;
  keep[n++] = p.status_fd;
  keep[n++] = p.tool_fd;
  return CloseAllFdsExcept(keep, n);
}

int ResetSignals(ChildPlan& p, const char**) {
  ::umask(0);
  if (!p.reset_signals) return 0;
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    ::sigaction(sig, &dfl, nullptr);  // glibc's reserved signals answer EINVAL: fine
  }
  return 0;
}

int JoinCgroups(ChildPlan& p, const char**) {
  if (!p.join_cgroups) return 0;
  for (int i = 0; i < p.cgroup_fd_count; ++i) {
    if (::write(p.cgroup_fds[i], "0", 1) != 1) return errno;
  }
  return 0;
}

int CgroupNs(ChildPlan& p, const char**) { return p.cgroup_ns ? EnterCgroupNamespace() : 0; }

int MountTree(ChildPlan& p, const char** detail) {
  return ApplyMountPlan(p.mount_ops, p.mount_op_count, p.new_root, detail);
}

int Hostname(ChildPlan& p, const char**) { return p.uts_ns ? SetHostname(p.hostname) : 0; }

int Loopback(ChildPlan& p, const char**) { return p.net_ns && p.loopback ? BringUpLoopback() : 0; }

int TimeNs(ChildPlan& p, const char**) { return p.time_ns ? EnterTimeNamespaceFromZero() : 0; }

int Rlimits(ChildPlan& p, const char**) { return ApplyRlimits(p.rlimits); }

// fds 0-3 from the plan, the listener socket (close-on-exec) as fd 4,
// kiln-init's status pipe as fd 5 and the tool channel as fd 6 (both kept
// across exec), and nothing else.
int Descriptors(ChildPlan& p, const char** detail) {
  int tmp[4];
  for (int i = 0; i < 4; ++i) {
    tmp[i] = -1;
    if (p.fds[i] < 0) continue;
    tmp[i] = ::fcntl(p.fds[i], F_DUPFD_CLOEXEC, 16);
    if (tmp[i] < 0) return errno;
  }
  int notify = -1, status = -1, tool = -1;
  if (p.tool_fd >= 0) {
    tool = ::fcntl(p.tool_fd, F_DUPFD_CLOEXEC, 16);
    if (tool < 0) return errno;
  }
  if (p.notify_sock >= 0) {
    notify = ::fcntl(p.notify_sock, F_DUPFD_CLOEXEC, 16);
    if (notify < 0) return errno;
  }
  if (p.status_fd >= 0) {
    status = ::fcntl(p.status_fd, F_DUPFD_CLOEXEC, 16);
    if (status < 0) return errno;
  }
  for (int i = 0; i < 4; ++i) {
    if (tmp[i] >= 0) {
      // Pipes are created by the (root) worker with mode 0600: hand them to
      // the sandbox user, so reopening them through /dev/stdin,
      // /proc/self/fd/N or /dev/stdout works as it does outside a sandbox.
      struct stat st;
      if (::fstat(tmp[i], &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))) {
        *detail = "fchown stdio";
        if (::fchown(tmp[i], p.uid, p.gid) != 0) return errno;
      }
      if (::dup2(tmp[i], i) < 0) return errno;
    } else if (i < 3) {
      *detail = "/dev/null";
      int fd = ::open("/dev/null", O_RDWR);  // no O_CLOEXEC: it becomes fd i
      if (fd < 0) return errno;
      if (fd != i) {
        if (::dup2(fd, i) < 0) return errno;
        ::close(fd);
      }
    } else {
      ::close(i);
    }
  }
  if (notify >= 0) {
    *detail = "listener socket";
    if (::dup3(notify, 4, O_CLOEXEC) < 0) return errno;
    p.notify_sock = 4;
  } else {
    ::close(4);
  }
  if (status >= 0) {
    *detail = "kiln-init status pipe";
    if (::dup2(status, 5) < 0) return errno;  // no O_CLOEXEC: kiln-init keeps it
    p.status_fd = 5;
  } else {
    ::close(5);
  }
  if (tool >= 0) {
    *detail = "tool channel";
    if (::dup2(tool, 6) < 0) return errno;  // no O_CLOEXEC: the program's, and its children's
    p.tool_fd = 6;
  } else {
    ::close(6);
  }
  return ::syscall(SYS_close_range, 7, ~0u, 0) == 0 ? 0 : errno;
}

int Credentials(ChildPlan& p, const char**) { return DropToUser(p.uid, p.gid); }

int NoNewPrivs(ChildPlan&, const char**) { return SetNoNewPrivs(); }

// If the worker dies (even SIGKILL), its sandboxes die with it: nothing runs
// unsupervised. Set after the uid change, which clears it, and kept across
// exec (no setuid binary is exec'd). The parent is the thread that cloned us:
// the worker's long-lived refill thread, or a job thread that outlives its
// sandbox.
int ParentDeath(ChildPlan&, const char**) {
  return ::prctl(PR_SET_PDEATHSIG, SIGKILL) == 0 ? 0 : errno;
}

// Its own session and process group (pgid = its pid as the worker sees it):
// the worker can signal every process of the sandbox at once (a session's
// interrupt is SIGINT to the group), and nothing shares the worker's group.
int NewSession(ChildPlan&, const char**) { return ::setsid() < 0 ? errno : 0; }

// The egress gateway's port is reachable only where the sandbox has its own
// network namespace: there, nothing but the worker can listen on it.
int Landlock(ChildPlan& p, const char**) {
  return p.landlock ? ApplyLandlock(p.landlock_abi, p.net_ns ? kSandboxProxyPort : 0) : 0;
}

// Sends `fd` over the unix socket `sock` (SCM_RIGHTS), from the stack.
int SendFd(int sock, int fd) {
  char byte = 'L';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  std::memset(control, 0, sizeof control);
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  return ::sendmsg(sock, &msg, MSG_NOSIGNAL) == 1 ? 0 : errno;
}

// Filter 1 with its listener, which goes to the worker (this process keeps
// no copy), then filter 2.
int Seccomp(ChildPlan& p, const char** detail) {
  if (!p.seccomp) return 0;
  if (p.notify_sock < 0) return EBADF;
  int listener = -1;
  if (int err = LoadSeccompFilter(p.seccomp_filters[0], p.seccomp_lens[0], &listener); err != 0)
    return err;
  *detail = "sending the listener";
  int err = SendFd(p.notify_sock, listener);
  ::close(listener);
  ::close(p.notify_sock);
  if (err != 0) return err;
  *detail = nullptr;
  return LoadSeccompFilter(p.seccomp_filters[1], p.seccomp_lens[1]);
}

struct Step {
  const char* name;
  const char* layer;
  StepFn fn;
};
constexpr Step kSteps[] = {
    {"inherited descriptors", "", CloseInherited},
    {"signals", "", ResetSignals},
    {"session", "", NewSession},
    {"join cgroups", "cgroups", JoinCgroups},
    {"cgroup namespace", "cgroup_ns", CgroupNs},
    {"mount tree", "filesystem", MountTree},
    {"hostname", "uts_ns", Hostname},
    {"loopback", "net_ns", Loopback},
    {"time namespace", "time_ns", TimeNs},
    {"descriptors", "", Descriptors},
    {"rlimits", "rlimits", Rlimits},
    {"uid/gid and capabilities", "user_ids", Credentials},
    {"parent death signal", "", ParentDeath},
    {"no_new_privs", "no_new_privs", NoNewPrivs},
    {"landlock", "landlock", Landlock},
    {"seccomp", "seccomp", Seccomp},
};

}  // namespace

int RunContainSteps(ChildPlan& p) {
  for (const Step& step : kSteps) {
    const char* detail = nullptr;
    int err = step.fn(p, &detail);
    if (err != 0) {
      p.failed_step = step.name;
      p.failed_detail = detail;
      p.failed_errno = err;
      return err;
    }
  }
  return 0;
}

int ContainAndExec(void* arg) {
  ChildPlan& p = *static_cast<ChildPlan*>(arg);
  if (RunContainSteps(p) != 0) ::_exit(127);
  ::umask(022);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execve(p.argv[0], const_cast<char* const*>(p.argv), const_cast<char* const*>(p.envp));
  p.failed_step = "execve";
  p.failed_detail = p.argv[0];
  p.failed_errno = errno;
  ::_exit(127);
}

int CloseAllFdsExcept(const int* keep, int count) {
  if (count < 0 || count > kMaxKeptFds) return EINVAL;
  int sorted[kMaxKeptFds];
  int n = 0;
  for (int i = 0; i < count; ++i) {  // insertion sort of the valid ones
    if (keep[i] < 0) continue;
    int j = n++;
    for (; j > 0 && sorted[j - 1] > keep[i]; --j) sorted[j] = sorted[j - 1];
    sorted[j] = keep[i];
  }
  unsigned int next = 0;  // lowest descriptor not yet dealt with
  for (int i = 0; i < n; ++i) {
    unsigned int fd = static_cast<unsigned int>(sorted[i]);
    if (fd > next && ::syscall(SYS_close_range, next, fd - 1, 0) != 0) return errno;
    if (fd + 1 > next) next = fd + 1;
  }
  return ::syscall(SYS_close_range, next, ~0u, 0) == 0 ? 0 : errno;
}

int StepIndex(const char* step) {
  if (step == nullptr) return -1;
  if (std::strcmp(step, "execve") == 0) return kExecStepIndex;
  for (size_t i = 0; i < sizeof kSteps / sizeof kSteps[0]; ++i) {
    if (std::strcmp(kSteps[i].name, step) == 0) return static_cast<int>(i);
  }
  return -1;
}

const char* StepName(int index) {
  if (index == kExecStepIndex) return "execve";
  if (index < 0 || static_cast<size_t>(index) >= sizeof kSteps / sizeof kSteps[0]) return "";
  return kSteps[index].name;
}

const char* LayerOfStep(const char* step) {
  if (step == nullptr) return "";
  for (const Step& s : kSteps) {
    if (std::strcmp(s.name, step) == 0) return s.layer;
  }
  return "";
}

}  // namespace kiln::worker::sandbox
