#include "tests/unit/runtimes/session_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>
#include <vector>

namespace kiln::worker::runtimes::testing {
namespace {

using common::UniqueFd;
using Clock = std::chrono::steady_clock;

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

void SetNonBlocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Reads what `fd` holds right now; resets it at EOF.
void Drain(UniqueFd& fd, std::string& sink) {
  std::array<char, 65536> buf;
  while (fd.valid()) {
    ssize_t n = ::read(fd.get(), buf.data(), buf.size());
    if (n > 0) {
      sink.append(buf.data(), static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      if (n == 0 || errno != EAGAIN) fd.Reset();
      return;
    }
  }
}

}  // namespace

std::unique_ptr<SessionProcess> SessionProcess::Start(const Runtime& runtime) {
  ::signal(SIGPIPE, SIG_IGN);  // a dead driver must fail a test, not kill it
  // Whatever the test process inherited must not reach the child either.
  ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
  std::unique_ptr<SessionProcess> s(new SessionProcess(runtime.language()));
  auto [in_r, in_w] = Pipe();
  auto [out_r, out_w] = Pipe();
  auto [err_r, err_w] = Pipe();
  auto [ctl_r, ctl_w] = Pipe();

  char dir_template[] = "/tmp/kiln_session_test_XXXXXX";
  Check(::mkdtemp(dir_template) != nullptr, "mkdtemp");
  s->dir_ = dir_template;

  Launch launch = runtime.SessionLaunch();
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
  posix_spawn_file_actions_addchdir_np(&actions, s->dir_.c_str());
  // Like the sandbox: its own process group, default signal dispositions (a
  // SIGINT ignored by whoever started ctest would make bash's trap a no-op).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig : {SIGINT, SIGQUIT, SIGTERM, SIGPIPE, SIGHUP}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  int rc = ::posix_spawn(&s->pid_, argv[0], &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  errno = rc;
  Check(rc == 0, "posix_spawn");

  s->in_ = std::move(in_w);
  s->out_ = std::move(out_r);
  s->err_ = std::move(err_r);
  s->ctl_ = std::move(ctl_r);
  for (UniqueFd* fd : {&s->in_, &s->out_, &s->err_, &s->ctl_}) SetNonBlocking(fd->get());
  return s;
}

SessionProcess::~SessionProcess() {
  if (pid_ > 0) {
    ::kill(-pid_, SIGKILL);  // the driver and whatever the code left behind
    if (!reaped_) ::waitpid(pid_, &status_, 0);
  }
  if (!dir_.empty()) std::filesystem::remove_all(dir_);
}

void SessionProcess::Send(std::string_view frame) { pending_in_.append(frame); }

void SessionProcess::CloseStdin() { close_in_ = true; }

void SessionProcess::Interrupt() { ::kill(-pid_, SIGINT); }

bool SessionProcess::Pump(std::chrono::milliseconds wait) {
  if (in_.valid() && pending_in_.empty() && close_in_) in_.Reset();
  std::vector<pollfd> pfds;
  if (in_.valid() && !pending_in_.empty()) pfds.push_back({in_.get(), POLLOUT, 0});
  for (UniqueFd* fd : {&out_, &err_, &ctl_}) {
    if (fd->valid()) pfds.push_back({fd->get(), POLLIN, 0});
  }
  if (pfds.empty()) return false;
  if (::poll(pfds.data(), pfds.size(), static_cast<int>(wait.count())) < 0 && errno != EINTR) {
    Check(false, "poll");
  }
  if (in_.valid() && !pending_in_.empty()) {
    ssize_t n = ::write(in_.get(), pending_in_.data(), pending_in_.size());
    if (n > 0) pending_in_.erase(0, static_cast<size_t>(n));
    if (n < 0 && errno != EAGAIN && errno != EINTR) {  // EPIPE: the driver is gone
      pending_in_.clear();
      in_.Reset();
    }
  }
  Drain(out_, out_data_);
  Drain(err_, err_data_);
  std::string control;
  Drain(ctl_, control);
  stream_.Feed(control);
  return true;
}

Execution SessionProcess::Await(std::chrono::milliseconds timeout) {
  Execution e;
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (auto outcome = stream_.Next()) {
      // The driver flushed the execution's output before writing the frame:
      // what is in the pipes now belongs to it.
      Drain(out_, out_data_);
      Drain(err_, err_data_);
      e.outcome = std::move(*outcome);
      break;
    }
    if (!ctl_.valid()) {
      Drain(out_, out_data_);
      Drain(err_, err_data_);
      e.eof = true;
      break;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      e.timed_out = true;
      break;
    }
    if (!Pump(std::min(left, std::chrono::milliseconds(100)))) {
      std::this_thread::sleep_for(std::min(left, std::chrono::milliseconds(10)));
    }
  }
  e.stdout_data = std::exchange(out_data_, {});
  e.stderr_data = std::exchange(err_data_, {});
  return e;
}

std::optional<int> SessionProcess::WaitExit(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!reaped_) {
    pid_t r = ::waitpid(pid_, &status_, WNOHANG);
    Check(r >= 0, "waitpid");
    if (r == pid_) {
      reaped_ = true;
      break;
    }
    if (Clock::now() >= deadline) return std::nullopt;
    if (!Pump(std::chrono::milliseconds(10))) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  if (WIFSIGNALED(status_)) return 128 + WTERMSIG(status_);
  return WEXITSTATUS(status_);
}

}  // namespace kiln::worker::runtimes::testing
