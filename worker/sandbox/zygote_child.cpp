// libkiln-zygote.so: the one function a zygote's interpreter calls, through
// its foreign-function interface, to start a sandbox (zygote.hpp). Loaded
// only into zygote processes, never into the worker; built without
// sanitizers (the interpreter is not sanitized).
//
//   int kiln_zygote_spawn(const char* msg, size_t size, const int* fds,
//                         int fd_count, int* pidfd);
//
// Decodes the plan (zygote_plan.hpp) and clone3()s a child A with the plan's
// namespaces, CLONE_PARENT (A is the worker's child: the worker waits for it
// and reads its rusage exactly as for a sandbox it cloned itself) and
// CLONE_PIDFD. Then, in three processes:
//   - the zygote: returns A's pid (> 0) and pidfd, or -errno;
//   - A (pid 1 of the new pid namespace): runs every contain step
//     (contain.hpp: cgroups, mounts, uid, Landlock, seccomp...), forks B
//     and execs kiln-init --adopt B, which reports "R" + B's pid on the
//     status channel and supervises B as it would a program it had forked
//     (worker/init/main.cpp). A failed step is reported as "F" + errno,
//     "S" + the step's index (contain.hpp, StepIndex), then A exits 127;
//   - B (the program): returns 0 into the interpreter, which runs the job.
//     B inherits every layer from A; it is the only process that keeps the
//     zygote's memory (A's exec drops it).
// The caller must hold its interpreter's global lock across the call and
// run the interpreter's own before/after-fork hooks around it, as its
// fork() would (python_zygote.py).
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "worker/sandbox/contain.hpp"
#include "worker/sandbox/mounts.hpp"
#include "worker/sandbox/zygote_plan.hpp"

extern "C" pid_t _Fork(void);  // glibc >= 2.34; not declared by <unistd.h> in C++

namespace {

using kiln::worker::sandbox::ChildPlan;

void Report(int fd, char tag, int value) {
  char rec[5];
  rec[0] = tag;
  std::memcpy(rec + 1, &value, sizeof value);
  ssize_t n;
  do {
    n = ::write(fd, rec, sizeof rec);
  } while (n < 0 && errno == EINTR);
}

[[noreturn]] void Fail(const ChildPlan& p, const char* step, int err) {
  Report(p.status_fd, 'F', err);
  Report(p.status_fd, 'S', kiln::worker::sandbox::StepIndex(step));
  ::_exit(127);
}

// A, after clone3: contain, fork B, become kiln-init. Returns only in B.
void RunChild(ChildPlan& p, const sigset_t& caller_mask) {
  p.reset_signals = false;  // B keeps the interpreter's dispositions
  if (kiln::worker::sandbox::RunContainSteps(p) != 0) Fail(p, p.failed_step, p.failed_errno);
  // _Fork, not clone3: glibc then records B's own thread id (raise(),
  // abort() and mutex owners rely on it); A's stays stale until its exec.
  pid_t b = _Fork();
  if (b < 0) Fail(p, "execve", errno);
  if (b == 0) {
    ::close(p.status_fd);  // only kiln-init keeps the status channel
    // The uid change made this process undumpable, and without an exec
    // nothing resets that: its own /proc/self files (environ, fd/...)
    // would be root's. An exec'd program is dumpable again; so is B.
    ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    ::umask(022);
    ::sigprocmask(SIG_SETMASK, &caller_mask, nullptr);
    return;
  }
  // kiln-init reports "R" once it runs: the sandbox is ready only then.
  // exec resets caught signals but keeps ignored ones: start kiln-init clean.
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
  }
  char pid_text[16];
  int n = 0;
  char digits[16];
  for (pid_t v = b; v > 0 && n < 15; v /= 10) digits[n++] = static_cast<char>('0' + v % 10);
  int at = 0;
  while (n > 0) pid_text[at++] = digits[--n];
  pid_text[at] = '\0';
  const char* argv[] = {kiln::worker::sandbox::kSandboxInitPath, "--adopt", pid_text, nullptr};
  // The same environment as an exec'd sandbox's kiln-init (the program's).
  ::execve(argv[0], const_cast<char* const*>(argv), const_cast<char* const*>(p.envp));
  Fail(p, "execve", errno);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int kiln_zygote_spawn(const char* msg,
                                                                        size_t size, const int* fds,
                                                                        int fd_count, int* pidfd) {
  std::string error;
  auto plan = kiln::worker::sandbox::DecodeZygotePlan(msg, size, fds, fd_count, &error);
  if (!plan) return -EINVAL;
  clone_args args;
  std::memset(&args, 0, sizeof args);
  int child_pidfd = -1;
  args.flags = plan->clone_flags | CLONE_PARENT | CLONE_PIDFD;
  args.pidfd = reinterpret_cast<uint64_t>(&child_pidfd);
  args.exit_signal = 0;  // CLONE_PARENT: A signals the worker as the zygote would
  sigset_t all, old;
  sigfillset(&all);
  ::sigprocmask(SIG_SETMASK, &all, &old);
  long pid = ::syscall(SYS_clone3, &args, sizeof args);
  if (pid == 0) {
    RunChild(plan->plan, old);
    return 0;  // B; the plan's storage is left alone (the interpreter never sees it)
  }
  int err = errno;
  ::sigprocmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) return -err;
  *pidfd = child_pidfd;
  return static_cast<int>(pid);
}
