// kiln-init run directly, outside any sandbox: the --adopt mode of
// zygote-born sandboxes (worker/init/main.cpp) when the adopted program has
// already ended before kiln-init starts (its SIGCHLD was dropped).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <string>

namespace kiln::worker {
namespace {

// The state letter of /proc/<pid>/stat ('Z' for a zombie).
char StateOf(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() ? '?' : stat[paren + 2];
}

TEST(KilnInit, AnAdoptedProgramThatEndedFirstIsReaped) {
  int status_pipe[2];
  ASSERT_EQ(::pipe2(status_pipe, O_CLOEXEC), 0);
  pid_t a = ::fork();
  ASSERT_GE(a, 0);
  if (a == 0) {
    // As a zygote's clone A: every signal blocked, B forked, B ends, every
    // action reset to SIG_DFL (which drops the pending SIGCHLD), then exec.
    sigset_t all;
    sigfillset(&all);
    ::sigprocmask(SIG_SETMASK, &all, nullptr);
    pid_t b = ::fork();
    if (b == 0) ::_exit(7);
    for (int i = 0; i < 2000 && StateOf(b) != 'Z'; ++i) ::usleep(1000);
    struct sigaction dfl;
    std::memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    ::sigaction(SIGCHLD, &dfl, nullptr);
    // fd 5 without close-on-exec (a dup2 onto itself would keep the flag).
    if (status_pipe[1] == 5 ? ::fcntl(5, F_SETFD, 0) != 0 : ::dup2(status_pipe[1], 5) != 5) {
      ::_exit(126);
    }
    const std::string pid = std::to_string(b);
    ::execl(KILN_BINARY_DIR "/bin/kiln-init", "kiln-init", "--adopt", pid.c_str(), nullptr);
    ::_exit(127);
  }
  ::close(status_pipe[1]);
  // Its reports ("R", then "X" with the wait status: 5 bytes each), then
  // its own exit; all within 10 s, where a lost SIGCHLD waits forever.
  std::string reports;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{status_pipe[0], POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[64];
    ssize_t n = ::read(status_pipe[0], buf, sizeof buf);
    if (n <= 0) break;
    reports.append(buf, static_cast<size_t>(n));
  }
  ::close(status_pipe[0]);
  int st = 0;
  if (StateOf(a) != 'Z') ::kill(a, SIGKILL);  // hung: fail below, leave nothing behind
  ASSERT_EQ(::waitpid(a, &st, 0), a);
  ASSERT_EQ(reports.size(), 10u) << "kiln-init never reported the adopted program's end";
  EXPECT_EQ(reports[0], 'R');
  EXPECT_EQ(reports[5], 'X');
  int reported;
  std::memcpy(&reported, reports.data() + 6, sizeof reported);
  EXPECT_TRUE(WIFEXITED(reported) && WEXITSTATUS(reported) == 7) << reported;
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 7) << st;
}

}  // namespace
}  // namespace kiln::worker
