// CloseAllFdsExcept, the sandbox child's first step: in a forked child (it
// closes descriptors of the calling process), every descriptor but the kept
// ones is closed, whatever the order, repeats and -1 entries of the list.
#include "worker/sandbox/contain.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <initializer_list>
#include <vector>

namespace kiln::worker::sandbox {
namespace {

// Runs in a forked child: opens descriptors at `open`, keeps `keep`, and
// exits 0 when exactly the kept ones of [0, 256) are still open, else with
// 100 + the first wrong descriptor (or 99 when the call failed).
[[noreturn]] void CheckInChild(std::initializer_list<int> open, std::vector<int> keep) {
  int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null < 0) ::_exit(98);
  for (int fd : open) {
    if (::dup2(null, fd) != fd) ::_exit(98);
  }
  if (CloseAllFdsExcept(keep.data(), static_cast<int>(keep.size())) != 0) ::_exit(99);
  for (int fd = 0; fd < 256; ++fd) {
    bool kept = false;
    for (int k : keep) kept = kept || k == fd;
    bool is_open = ::fcntl(fd, F_GETFD) >= 0;
    if (is_open != kept) ::_exit(100 + fd);
  }
  ::_exit(0);
}

int ExitCodeOf(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(CloseAllFdsExcept, KeepsExactlyTheListedDescriptors) {
  struct Case {
    std::initializer_list<int> open;
    std::vector<int> keep;
  };
  const Case cases[] = {
      {{5, 9, 40, 41, 200}, {41, 9}},              // unsorted
      {{5, 9, 40}, {9, 9, -1, 40}},                // repeats and -1
      {{3, 4, 5, 6}, {4, 5}},                      // adjacent: no gap to close between them
      {{7, 8}, {}},                                // nothing kept: 0, 1 and 2 go too
      {{10, 11}, {0, 1, 2, 10}},                   // the lowest descriptors kept
      {{20, 30, 255}, {-1, -1, -1, -1, 30, 255}},  // the plan's shape: stdio slots, cgroup fds
  };
  for (const Case& c : cases) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) CheckInChild(c.open, c.keep);
    int code = ExitCodeOf(pid);
    EXPECT_EQ(code, 0) << "exit 99: the call failed; 100 + fd: that descriptor is wrong";
  }
}

TEST(CloseAllFdsExcept, RefusesMoreThanItCanKeep) {
  std::vector<int> keep(kMaxKeptFds + 1, 3);
  EXPECT_EQ(CloseAllFdsExcept(keep.data(), static_cast<int>(keep.size())), EINVAL);
  EXPECT_EQ(CloseAllFdsExcept(keep.data(), -1), EINVAL);
}

}  // namespace
}  // namespace kiln::worker::sandbox
