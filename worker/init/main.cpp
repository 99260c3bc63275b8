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
// program cannot be executed; "X" + its wait status when it has ended. The
// worker finds the program itself as this process's first child.
//
//   kiln-init PROGRAM [ARG...]
//
// Only libc, no allocation after start: it is exec'd for every sandbox.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

constexpr int kStatusFd = 5;
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

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 127;
  fcntl(kStatusFd, F_SETFD, FD_CLOEXEC);
  if (access(argv[1], X_OK) != 0) {
    Report('E', errno);
    return 127;
  }
  // Every signal waits for sigwaitinfo (a blocked signal reaches an init
  // even from outside its namespace, where an unhandled one would not).
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &all, nullptr);

  pid_t program = fork();
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

  for (;;) {
    siginfo_t info;
    int sig = sigwaitinfo(&all, &info);
    if (sig < 0) continue;
    if (sig != SIGCHLD) {
      for (int f : kForwarded) {
        if (f == sig) kill(program, sig);
      }
      continue;
    }
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      if (pid != program) continue;  // an orphan, reaped
      Report('X', status);
      // Mirrored for anyone who reads only pid 1's status.
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
  }
}
