#include "worker/sandbox/zygote.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>

#include "worker/sandbox/fd_passing.hpp"
#include "worker/sandbox/namespaces.hpp"

namespace kiln::worker::sandbox {
namespace {

using common::Status;
using common::StatusOr;
using common::UniqueFd;

constexpr int kReplyTimeoutMs = 10000;  // covers the zygote's own start (~50 ms)

struct ExecPlan {
  const char* const* argv;
  const char* const* envp;
  int sock;  // becomes fd 3
  int dev_null;
};

// The clone()d child (shares the launcher's memory until exec): fd 0 and 1
// /dev/null, 2 the worker's stderr, 3 the socket; its own session; killed
// with the launcher thread.
int ExecZygote(void* arg) {
  const ExecPlan& p = *static_cast<const ExecPlan*>(arg);
  if (::unshare(CLONE_FILES) != 0) ::_exit(126);
  // Both above 9 first: a dup2 onto the descriptor itself (the socket
  // already at 3) would keep its close-on-exec flag.
  const int sock = ::fcntl(p.sock, F_DUPFD, 10), null = ::fcntl(p.dev_null, F_DUPFD, 10);
  if (sock < 0 || null < 0 || ::dup2(null, 0) < 0 || ::dup2(null, 1) < 0 || ::dup2(sock, 3) < 0) {
    ::_exit(126);
  }
  ::syscall(SYS_close_range, 4, ~0u, 0);
  ::setsid();
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execve(p.argv[0], const_cast<char* const*>(p.argv), const_cast<char* const*>(p.envp));
  ::_exit(127);
}

}  // namespace

StatusOr<std::shared_ptr<Zygote>> Zygote::Start(const std::vector<std::string>& argv,
                                                const std::vector<std::string>& env,
                                                const std::string& library) {
  if (argv.empty() || argv[0].empty() || argv[0][0] != '/') {
    return common::InvalidRequest("zygote argv[0] must be an absolute path");
  }
  std::shared_ptr<Zygote> z(new Zygote);
  int efd = ::eventfd(0, EFD_CLOEXEC);
  if (efd < 0) return common::ErrnoStatus("eventfd for the zygote", errno);
  z->stop_.Reset(efd);
  std::vector<std::string> full = argv;
  full.push_back(library);
  std::promise<Status> started;
  auto result = started.get_future();
  Zygote* self = z.get();
  z->launcher_ = std::thread([self, full, env, &started] {
    Status st;
    self->Launch(full, env, &st);
    bool ok = st.ok();
    started.set_value(std::move(st));
    if (!ok) return;
    // Parent of the zygote and, through CLONE_PARENT, of every sandbox it
    // spawned: stay until the Zygote is destroyed, reaping the zygote when
    // it ends.
    UniqueFd pidfd = std::move(self->pidfd_);
    bool reaped = false;
    for (;;) {
      pollfd p[2] = {{self->stop_.get(), POLLIN, 0}, {pidfd.get(), POLLIN, 0}};
      int n = ::poll(p, reaped ? 1 : 2, -1);
      if (n < 0 && errno == EINTR) continue;
      if (p[0].revents != 0) break;
      if (!reaped && p[1].revents != 0) {
        siginfo_t info{};
        ::waitid(P_PIDFD, static_cast<id_t>(pidfd.get()), &info, WEXITED);
        reaped = true;
        std::lock_guard lock(self->mu_);
        self->dead_ = true;
      }
    }
    if (!reaped) {
      ::syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0);
      siginfo_t info{};
      ::waitid(P_PIDFD, static_cast<id_t>(pidfd.get()), &info, WEXITED);
    }
  });
  Status st = result.get();
  if (!st.ok()) {
    z->launcher_.join();
    return st;
  }
  return z;
}

void Zygote::Launch(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                    Status* result) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    *result = common::ErrnoStatus("socketpair for the zygote", errno);
    return;
  }
  sock_.Reset(sv[0]);
  UniqueFd theirs(sv[1]);
  UniqueFd dev_null(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!dev_null.valid()) {
    *result = common::ErrnoStatus("/dev/null", errno);
    return;
  }
  std::vector<const char*> args, envp;
  for (const std::string& a : argv) args.push_back(a.c_str());
  args.push_back(nullptr);
  for (const std::string& e : env) envp.push_back(e.c_str());
  envp.push_back(nullptr);
  ExecPlan plan{args.data(), envp.data(), theirs.get(), dev_null.get()};
  int pidfd = -1;
  pid_t pid = CloneVforked(0, ExecZygote, &plan, &pidfd);
  pidfd_.Reset(pidfd);
  if (pid < 0) {
    *result = common::ErrnoStatus("starting the zygote", -pid);
    return;
  }
  pid_ = pid;
  *result = Status::Ok();
}

Zygote::~Zygote() {
  if (launcher_.joinable()) {
    uint64_t one = 1;
    (void)!::write(stop_.get(), &one, sizeof one);
    launcher_.join();
  }
}

bool Zygote::alive() const {
  std::lock_guard lock(mu_);
  return !dead_;
}

uint64_t Zygote::spawned() const {
  std::lock_guard lock(mu_);
  return spawned_;
}

StatusOr<ZygoteChild> Zygote::Spawn(const std::string& message, const std::vector<int>& fds) {
  if (fds.size() > kMaxPassedFds) return common::Internal("too many descriptors for the zygote");
  std::lock_guard lock(mu_);
  auto died = [&](const std::string& why) {
    dead_ = true;
    return common::Unavailable("the zygote is gone: " + why);
  };
  if (dead_) return common::Unavailable("the zygote is gone");
  if (Status st = SendWithFds(sock_.get(), message, fds); !st.ok()) return died(st.message());
  pollfd p{sock_.get(), POLLIN, 0};
  int n;
  do {
    n = ::poll(&p, 1, kReplyTimeoutMs);
  } while (n < 0 && errno == EINTR);
  if (n == 0) return died("no answer in time");
  auto got = ReceiveWithFds(sock_.get(), 2 * sizeof(int32_t), 1);
  if (!got.ok()) return died(got.status().message());
  if (got->bytes.empty()) return died("it exited");
  if (got->bytes.size() != 2 * sizeof(int32_t)) return died("a malformed answer");
  int32_t reply[2];
  std::memcpy(reply, got->bytes.data(), sizeof reply);
  UniqueFd pidfd;
  if (got->fds.size() == 1) pidfd = std::move(got->fds[0]);
  if (reply[0] <= 0) {
    return common::ErrnoStatus("the zygote could not clone a sandbox", reply[1]);
  }
  if (!pidfd.valid()) return died("no pidfd with its answer");
  ++spawned_;
  return ZygoteChild{reply[0], std::move(pidfd)};
}

}  // namespace kiln::worker::sandbox
