#include "tests/unit/runtimes/run_wrapper.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "common/unique_fd.hpp"

namespace kiln::worker::runtimes::testing {
namespace {

using common::UniqueFd;

void Check(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string(what) + ": " + std::strerror(errno));
}

// A close-on-exec pipe whose ends sit at fd >= 10, clear of the 0-3 targets.
std::pair<UniqueFd, UniqueFd> Pipe() {
  int fds[2];
  Check(::pipe2(fds, O_CLOEXEC) == 0, "pipe2");
  UniqueFd r(::fcntl(fds[0], F_DUPFD_CLOEXEC, 10)), w(::fcntl(fds[1], F_DUPFD_CLOEXEC, 10));
  ::close(fds[0]);
  ::close(fds[1]);
  Check(r.valid() && w.valid(), "fcntl");
  return {std::move(r), std::move(w)};
}

}  // namespace

RunOutput RunWrapper(const Runtime& runtime, std::string_view frame,
                     std::chrono::milliseconds timeout) {
  // Whatever the test process inherited must not reach the child either.
  ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
  auto [in_r, in_w] = Pipe();
  auto [out_r, out_w] = Pipe();
  auto [err_r, err_w] = Pipe();
  auto [ctl_r, ctl_w] = Pipe();

  char dir_template[] = "/tmp/kiln_rt_test_XXXXXX";
  Check(::mkdtemp(dir_template) != nullptr, "mkdtemp");
  std::string dir = dir_template;

  Launch launch = runtime.OneShotLaunch();
  std::vector<char*> argv, envp;
  for (auto& a : launch.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : launch.env) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_r.get(), 0);
  posix_spawn_file_actions_adddup2(&actions, out_w.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, err_w.get(), 2);
  posix_spawn_file_actions_adddup2(&actions, ctl_w.get(), 3);
  posix_spawn_file_actions_addchdir_np(&actions, dir.c_str());
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  errno = rc;
  Check(rc == 0, "posix_spawn");
  in_r.Reset();
  out_w.Reset();
  err_w.Reset();
  ctl_w.Reset();

  RunOutput result;
  for (int fd : {in_w.get(), out_r.get(), err_r.get(), ctl_r.get()}) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  size_t written = 0;
  if (frame.empty()) in_w.Reset();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::array<char, 65536> buf;
  while (in_w.valid() || out_r.valid() || err_r.valid() || ctl_r.valid()) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      result.timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    std::vector<pollfd> pfds;
    if (in_w.valid()) pfds.push_back({in_w.get(), POLLOUT, 0});
    for (UniqueFd* fd : {&out_r, &err_r, &ctl_r}) {
      if (fd->valid()) pfds.push_back({fd->get(), POLLIN, 0});
    }
    Check(::poll(pfds.data(), pfds.size(), static_cast<int>(left.count())) >= 0 || errno == EINTR,
          "poll");
    if (in_w.valid()) {
      ssize_t n = ::write(in_w.get(), frame.data() + written, frame.size() - written);
      if (n > 0) written += static_cast<size_t>(n);
      if ((n < 0 && errno != EAGAIN) || written == frame.size()) in_w.Reset();  // EOF: go
    }
    for (auto [fd, sink] :
         {std::pair{&out_r, &result.stdout_data}, std::pair{&err_r, &result.stderr_data},
          std::pair{&ctl_r, &result.control}}) {
      if (!fd->valid()) continue;
      ssize_t n = ::read(fd->get(), buf.data(), buf.size());
      if (n > 0) sink->append(buf.data(), static_cast<size_t>(n));
      if (n == 0 || (n < 0 && errno != EAGAIN)) fd->Reset();
    }
  }
  int status = 0;
  Check(::waitpid(pid, &status, 0) == pid, "waitpid");
  if (WIFEXITED(status)) result.exit_status = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  std::filesystem::remove_all(dir);
  return result;
}

}  // namespace kiln::worker::runtimes::testing
