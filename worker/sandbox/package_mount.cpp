#include "worker/sandbox/package_mount.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/unique_fd.hpp"

namespace kiln::worker::sandbox {

common::Status MountIntoSandbox(int pidfd, pid_t pid, const std::string& host_dir,
                                const char* target) {
  if (target == nullptr || target[0] != '/' || target[1] == '\0') {
    return common::Internal("MountIntoSandbox: target must be an absolute path below /");
  }
  common::UniqueFd tree(
      ::open_tree(AT_FDCWD, host_dir.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE));
  if (!tree.valid()) return common::ErrnoStatus("open_tree " + host_dir, errno);
  mount_attr attr{};
  attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  if (::mount_setattr(tree.get(), "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof(attr)) != 0) {
    return common::ErrnoStatus("mount_setattr", errno);
  }
  // The sandbox's root as its pid 1 sees it: the target is resolved from
  // there (after setns, our root would be the namespace's original one).
  const std::string root_link = "/proc/" + std::to_string(pid) + "/root";
  common::UniqueFd root(::open(root_link.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root.valid()) return common::ErrnoStatus("open " + root_link, errno);
  const char* relative = target + 1;

  // The child reports the failing step's errno through its exit status:
  // 10 + step, with errno written first on the pipe.
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return common::ErrnoStatus("pipe2", errno);
  common::UniqueFd err_r(pipe_fds[0]), err_w(pipe_fds[1]);
  const pid_t child = ::fork();
  if (child < 0) return common::ErrnoStatus("fork", errno);
  if (child == 0) {  // async-signal-safe calls only
    auto fail = [&](int step) {
      int e = errno;
      ssize_t n = ::write(err_w.get(), &e, sizeof(e));
      (void)n;
      ::_exit(10 + step);
    };
    if (::setns(pidfd, CLONE_NEWNS) != 0) fail(0);
    if (::fchdir(root.get()) != 0) fail(1);
    // A set mounted before (a session's earlier packages) goes first.
    if (::umount2(relative, MNT_DETACH | UMOUNT_NOFOLLOW) != 0 && errno != EINVAL) fail(2);
    if (::move_mount(tree.get(), "", AT_FDCWD, relative, MOVE_MOUNT_F_EMPTY_PATH) != 0) fail(3);
    ::_exit(0);
  }
  err_w.Reset();
  int wstatus = 0;
  while (::waitpid(child, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) return common::Status::Ok();
  int err = 0;
  if (::read(err_r.get(), &err, sizeof(err)) != sizeof(err)) err = 0;
  static const char* kSteps[] = {"setns", "fchdir", "umount2", "move_mount"};
  int step = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) - 10 : -1;
  if (step < 0 || step > 3) return common::Internal("mounting packages: the helper died");
  return common::ErrnoStatus(std::string("mounting packages: ") + kSteps[step], err);
}

}  // namespace kiln::worker::sandbox
