// kiln-init: pid 1 of every sandbox, in front of the job's program.
//
// A pid namespace's init is special to the kernel: it gets no signal it has
// no handler for, so a program running as pid 1 could not be killed by its
// own code (`os.kill(os.getpid(), 9)` did nothing), and orphans were
// reparented to an interpreter that never reaps them. This tiny init
// (started by the worker's contain pipeline as /etc/kiln-init, already
// inside every namespace, uid, Landlock and seccomp layer) runs the program
// as its child and:
//   - reaps every orphan;
//   - forwards SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGWINCH sent
//     to it to the program (SIGINT is not forwarded: the worker interrupts
//     the whole process group, the program included);
//   - when the program ends, reports its wait status to the worker and
//     exits, and the kernel ends every other process of the namespace.
//
// Status channel: descriptor 5 (a pipe to the worker; close-on-exec here so
// the program never holds it). Records of 5 bytes: "E" + errno when the
// program cannot be executed; "X" + its wait status when it has ended; "R"
// + its pid when an adopted one (below) is supervised. The worker finds the
// program itself as this process's first child.
//
//   kiln-init PROGRAM [ARG...]
//   kiln-init --connect SOCKET PROGRAM [ARG...]
//   kiln-init --adopt PID
//
// --adopt (a zygote-born sandbox, worker/sandbox/zygote_child.cpp): the
// program is already running as this process's child PID (forked from a
// zygote's interpreter before this exec); it is supervised as above, and
// "R" + PID is reported once this init is in place.
//
// --connect (the gVisor level, where runsc passes no descriptor of the
// worker's into the sandbox): fd 5 is a connection to the worker's Unix
// socket SOCKET; over it the worker sends the job's stdin, stdout, stderr
// and control channel (SCM_RIGHTS, 3 or 4 descriptors), installed as fds
// 0-3, and the tool channel (a 5th), installed as fd 6, before the program
// exists. (runsc's own stdio would do for 0-2, but
// gVisor holds those until the whole sandbox ends, so the worker would see
// their EOF only then.) Then:
//   - a SIGINT from outside the sandbox (the worker's interrupt reaches
//     only pid 1 there) is passed on to the whole process group, as the
//     worker does itself at the standard level;
//   - the worker's prlimit cannot reach into gVisor's kernel, so the job's
//     rlimits come over fd 5: "L" + kLimitCount records of {int32 resource,
//     uint64 soft, uint64 hard}, set on the program with prlimit and
//     answered "A" + 0 (or the errno of the first that failed). Limits are
//     only lowered, and RLIMIT_CPU counts from the CPU the program has
//     already used, as prlimit does at the standard level (rlimits.cpp).
//
// Not dumpable (PR_SET_DUMPABLE 0), so the job, which runs as the same uid,
// cannot open this process's /proc entries (fd 5, environ, mem) or trace it.
//
// Only libc, no allocation after start: it is exec'd for every sandbox.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

constexpr int kStatusFd = 5;
constexpr int kLimitCount = 6;
constexpr int kLimitBytes = 4 + 8 + 8;
constexpr int kForwarded[] = {SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH};

void Report(char tag, int value) {
  char rec[5];
  rec[0] = tag;
  memcpy(rec + 1, &value, sizeof value);
  ssize_t n;
  do {
    n = write(kStatusFd, rec, sizeof rec);
  } while (n < 0 && errno == EINTR);
}

// The job's descriptors from the worker (one message on kStatusFd), as fds
// 0-3 and 6 (the tool channel); fd 3 stays closed when the worker sent only
// three, fd 6 when it sent fewer than five.
bool ReceiveStdio() {
  char byte;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(5 * sizeof(int))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = recvmsg(kStatusFd, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (n != 1 || c == nullptr || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
    return false;
  }
  const int count = static_cast<int>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
  if (count < 3 || count > 5) return false;
  int got[5];
  memcpy(got, CMSG_DATA(c), count * sizeof(int));
  // Above 6 first: a received descriptor may itself be one of the targets.
  for (int i = 0; i < count; ++i) {
    int moved = fcntl(got[i], F_DUPFD_CLOEXEC, 16);
    if (moved < 0) return false;
    close(got[i]);
    got[i] = moved;
  }
  constexpr int kTargets[5] = {0, 1, 2, 3, 6};
  for (int i = 0; i < 5; ++i) {
    if (i < count) {
      if (dup2(got[i], kTargets[i]) != kTargets[i]) return false;
      close(got[i]);
    } else {
      close(kTargets[i]);
    }
  }
  return true;
}

// A connection to the worker's socket at `path`, installed as `fd`.
bool ConnectAs(const char* path, int fd) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (strlen(path) >= sizeof addr.sun_path) return false;
  strcpy(addr.sun_path, path);
  int s = socket(AF_UNIX, SOCK_STREAM, 0);
  if (s < 0) return false;
  int rc;
  do {
    rc = connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0 || (s != fd && dup2(s, fd) != fd)) return false;
  if (s != fd) close(s);
  return true;
}

bool ReadFull(int fd, char* buf, size_t n) {
  while (n > 0) {
    ssize_t got = read(fd, buf, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    buf += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

// CPU seconds `pid` has used (utime + stime in /proc/<pid>/stat), rounded
// down; 0 when unknown.
uint64_t UsedCpuSeconds(pid_t pid) {
  char path[64] = "/proc/";
  char digits[16];
  int n = 0;
  for (pid_t v = pid; v > 0 && n < 15; v /= 10) digits[n++] = static_cast<char>('0' + v % 10);
  size_t at = strlen(path);
  while (n > 0) path[at++] = digits[--n];
  strcpy(path + at, "/stat");
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];
  ssize_t got = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (got <= 0) return 0;
  buf[got] = '\0';
  const char* p = strrchr(buf, ')');
  if (p == nullptr) return 0;
  // Fields after ')' start at 3 (state); utime and stime are 14 and 15.
  uint64_t ticks = 0, value = 0;
  int field = 2;
  for (++p; *p != '\0' && field <= 15; ++p) {
    if (*p == ' ') {
      ++field;
      value = 0;
      continue;
    }
    value = value * 10 + static_cast<uint64_t>(*p - '0');
    if ((field == 14 || field == 15) && (p[1] == ' ' || p[1] == '\0')) ticks += value;
  }
  long hz = sysconf(_SC_CLK_TCK);
  return ticks / static_cast<uint64_t>(hz > 0 ? hz : 100);
}

// One "L" record from the worker, applied to the program. False once the
// worker's end is closed (nothing more will come).
bool ApplyLimits(pid_t program) {
  char rec[1 + kLimitCount * kLimitBytes];
  if (!ReadFull(kStatusFd, rec, sizeof rec) || rec[0] != 'L') return false;
  int failed = 0;
  for (int i = 0; i < kLimitCount; ++i) {
    const char* at = rec + 1 + i * kLimitBytes;
    int resource;
    uint64_t soft, hard;
    memcpy(&resource, at, 4);
    memcpy(&soft, at + 4, 8);
    memcpy(&hard, at + 12, 8);
    const auto res = static_cast<__rlimit_resource>(resource);
    if (res == RLIMIT_CPU) {
      const uint64_t used = UsedCpuSeconds(program);
      soft += used;
      hard += used;
    }
    rlimit old;
    int rc = prlimit(program, res, nullptr, &old);
    if (rc == 0) {
      rlimit rl{soft < old.rlim_max ? soft : old.rlim_max,
                hard < old.rlim_max ? hard : old.rlim_max};
      if (rl.rlim_cur > rl.rlim_max) rl.rlim_cur = rl.rlim_max;
      rc = prlimit(program, res, &rl, nullptr);
    }
    if (rc != 0 && failed == 0) failed = errno;
  }
  Report('A', failed);
  return true;
}

// The next signal: from sigwaitinfo, or (--connect) from a signalfd polled
// with the status channel, whose limit records are handled meanwhile.
int NextSignal(const sigset_t& all, int sfd, bool* worker_open, pid_t program, pid_t* sender) {
  if (sfd < 0) {
    siginfo_t info;
    int sig = sigwaitinfo(&all, &info);
    *sender = sig > 0 ? info.si_pid : 0;
    return sig;
  }
  pollfd pfds[2] = {{sfd, POLLIN, 0}, {kStatusFd, POLLIN, 0}};
  if (poll(pfds, *worker_open ? 2 : 1, -1) < 0) return -1;
  if (pfds[1].revents != 0 && !ApplyLimits(program)) *worker_open = false;
  if (!(pfds[0].revents & POLLIN)) return -1;
  signalfd_siginfo info;
  if (read(sfd, &info, sizeof info) != sizeof info) return -1;
  *sender = static_cast<pid_t>(info.ssi_pid);
  return static_cast<int>(info.ssi_signo);
}

}  // namespace

int main(int argc, char** argv) {
  // Not dumpable: the job runs as this process's uid, and could otherwise
  // open /proc/1/fd/5 to forge an exit record or fill the status pipe, or
  // ptrace this init. The program's exec makes it dumpable again.
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  pid_t adopted = 0;
  if (argc == 3 && strcmp(argv[1], "--adopt") == 0) {
    adopted = static_cast<pid_t>(atoi(argv[2]));
    if (adopted <= 0) return 127;
  }
  bool connected = false;
  if (argc >= 3 && strcmp(argv[1], "--connect") == 0) {
    if (!ConnectAs(argv[2], kStatusFd) || !ReceiveStdio()) return 126;
    connected = true;
    argc -= 2;
    argv += 2;
  }
  if (argc < 2) return 127;
  fcntl(kStatusFd, F_SETFD, FD_CLOEXEC);
  if (adopted == 0 && access(argv[1], X_OK) != 0) {
    Report('E', errno);
    return 127;
  }
  // Every signal waits for sigwaitinfo (a blocked signal reaches an init
  // even from outside its namespace, where an unhandled one would not).
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &all, nullptr);
  // Only a child's end is news here: a session's program is stopped after
  // every execution and continued before the next, and would wake this init
  // both times for nothing (exec gives the program its own SIGCHLD action).
  struct sigaction chld;
  memset(&chld, 0, sizeof chld);
  chld.sa_handler = SIG_DFL;
  chld.sa_flags = SA_NOCLDSTOP;
  sigaction(SIGCHLD, &chld, nullptr);
  // An adopted program's sandbox is ready from here on: the worker waits
  // for this before it gives the program its job.
  if (adopted != 0) Report('R', adopted);

  pid_t program = adopted != 0 ? adopted : fork();
  if (program < 0) {
    Report('E', errno);
    return 127;
  }
  if (program == 0) {
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execv(argv[1], argv + 1);
    _exit(127);
  }
  // Only the program holds the job's stdio and control channel.
  for (int fd = 0; fd <= 3; ++fd) close(fd);
  const int sfd = connected ? signalfd(-1, &all, SFD_CLOEXEC) : -1;
  bool worker_open = connected;

  // An adopted program may have ended before this init ran: the SIGCHLD it
  // sent then was dropped (its action set to SIG_DFL above, or before the
  // exec), so look once before waiting for the next one.
  bool reap = adopted != 0;
  for (;;) {
    if (reap) {
      int status;
      pid_t pid;
      while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        if (pid != program) continue;  // an orphan, reaped
        Report('X', status);
        // Mirrored for anyone who reads only pid 1's status.
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
    }
    pid_t sender = 0;
    int sig = NextSignal(all, sfd, &worker_open, program, &sender);
    reap = sig == SIGCHLD;
    if (sig < 0) continue;
    if (sig == SIGINT && connected && sender != getpid()) {
      kill(0, SIGINT);  // comes back here with our own pid: not passed on again
      continue;
    }
    if (sig != SIGCHLD) {
      for (int f : kForwarded) {
        if (f == sig) kill(program, sig);
      }
    }
  }
}
