// runsc's child and commands for the gVisor level (gvisor_runsc.hpp): only
// gvisor_sandbox.cpp calls them.
#include "worker/sandbox/gvisor_runsc.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "common/unique_fd.hpp"
#include "worker/sandbox/contain.hpp"
#include "worker/sandbox/fs_util.hpp"
#include "worker/sandbox/namespaces.hpp"

namespace kiln::worker::sandbox {
namespace {

using common::Status;
using common::UniqueFd;

}  // namespace

int StartRunsc(void* arg) {
  auto* p = static_cast<RunscPlan*>(arg);
  if (::unshare(CLONE_FILES) != 0) _exit(120);
  for (int i = 0; i < p->cgroup_fd_count; ++i) {
    if (::write(p->cgroup_fds[i], "0", 1) != 1) _exit(121);
  }
  ::setsid();
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // Above 2 first, so that dup2 onto 0-2 cannot clobber a source.
  int moved[3];
  for (int i = 0; i < 3; ++i) {
    moved[i] = ::fcntl(p->stdio[i], F_DUPFD_CLOEXEC, 3);
    if (moved[i] < 0) _exit(122);
  }
  for (int i = 0; i < 3; ++i) {
    if (::dup2(moved[i], i) != i) _exit(123);
  }
  int keep[] = {0, 1, 2};
  if (CloseAllFdsExcept(keep, 3) != 0) _exit(124);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execve(p->path, p->argv, p->envp);
  _exit(127);
}

Status RunRunsc(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  char* envp[] = {const_cast<char*>("PATH=/usr/sbin:/usr/bin:/sbin:/bin"), nullptr};
  UniqueFd null(::open("/dev/null", O_RDWR | O_CLOEXEC));
  RunscPlan plan;
  plan.path = argv[0];
  plan.argv = argv.data();
  plan.envp = envp;
  plan.stdio[0] = plan.stdio[1] = plan.stdio[2] = null.get();
  int pidfd = -1;
  pid_t pid = CloneVforked(0, StartRunsc, &plan, &pidfd);
  if (pid < 0) return common::ErrnoStatus("starting runsc " + args.back(), -pid);
  UniqueFd owned(pidfd);
  pollfd pfd{owned.get(), POLLIN, 0};
  int ready;
  do {
    ready = ::poll(&pfd, 1, kRunscCommandTimeoutMs);
  } while (ready < 0 && errno == EINTR);
  if (ready == 0) ::kill(pid, SIGKILL);  // not reaped yet: the pid is still its own
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::Ok();
  return common::Internal("runsc " + args[args.size() - 2] + " " + args.back() +
                          " failed (status " + std::to_string(status) + ")");
}

std::string LogTail(const std::string& path) {
  auto text = ReadFileString(path);
  if (!text.ok() || text->empty()) return "no log";
  std::string s = *text;
  while (!s.empty() && s.back() == '\n') s.pop_back();
  size_t from = s.size() > 400 ? s.size() - 400 : 0;
  return s.substr(from);
}

}  // namespace kiln::worker::sandbox
