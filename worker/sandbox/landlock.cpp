#include "worker/sandbox/landlock.hpp"

#include <fcntl.h>
#include <linux/types.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace kiln::worker::sandbox {
namespace {

// Debian 12's headers describe ABI 1-2 only: our own declarations.
struct RulesetAttr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;  // ABI 4
  uint64_t scoped;              // ABI 6
};
struct PathBeneathAttr {
  uint64_t allowed_access;
  int32_t parent_fd;
} __attribute__((packed));
struct NetPortAttr {  // ABI 4
  uint64_t allowed_access;
  uint64_t port;
};

constexpr unsigned kCreateRulesetVersion = 1u << 0;
constexpr int kRulePathBeneath = 1;
constexpr int kRuleNetPort = 2;

constexpr uint64_t kExecute = 1ull << 0, kWriteFile = 1ull << 1, kReadFile = 1ull << 2,
                   kReadDir = 1ull << 3, kRemoveDir = 1ull << 4, kRemoveFile = 1ull << 5,
                   kMakeChar = 1ull << 6, kMakeDir = 1ull << 7, kMakeReg = 1ull << 8,
                   kMakeSock = 1ull << 9, kMakeFifo = 1ull << 10, kMakeBlock = 1ull << 11,
                   kMakeSym = 1ull << 12, kRefer = 1ull << 13, kTruncate = 1ull << 14,
                   kIoctlDev = 1ull << 15;
constexpr uint64_t kNetBindTcp = 1ull << 0, kNetConnectTcp = 1ull << 1;
constexpr uint64_t kScopeAbstractUnix = 1ull << 0, kScopeSignal = 1ull << 1;

uint64_t HandledFs(int abi) {
  uint64_t all = (1ull << 13) - 1;  // ABI 1
  if (abi >= 2) all |= kRefer;
  if (abi >= 3) all |= kTruncate;
  if (abi >= 5) all |= kIoctlDev;
  return all;
}

int AddRule(int ruleset, const char* path, uint64_t access) {
  int fd = ::open(path, O_PATH | O_CLOEXEC);
  if (fd < 0) return errno;
  PathBeneathAttr attr{access, fd};
  long rc = ::syscall(SYS_landlock_add_rule, ruleset, kRulePathBeneath, &attr, 0);
  int err = rc == 0 ? 0 : errno;
  ::close(fd);
  return err;
}

}  // namespace

int LandlockAbi() {
  long abi = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, kCreateRulesetVersion);
  if (abi < 0) return errno == ENOSYS || errno == EOPNOTSUPP ? 0 : -errno;
  return static_cast<int>(abi);
}

int ApplyLandlock(int abi, uint16_t connect_port) {
  const uint64_t handled = HandledFs(abi);
  RulesetAttr attr{handled, 0, 0};
  size_t size = sizeof(uint64_t);
  if (abi >= 4) attr.handled_access_net = kNetBindTcp | kNetConnectTcp, size = 2 * sizeof(uint64_t);
  if (abi >= 6) attr.scoped = kScopeAbstractUnix | kScopeSignal, size = sizeof attr;
  long ruleset = ::syscall(SYS_landlock_create_ruleset, &attr, size, 0);
  if (ruleset < 0) return errno;
  int fd = static_cast<int>(ruleset);
  const uint64_t read_exec = kExecute | kReadFile | kReadDir;
  const uint64_t read_write = handled & ~(kMakeChar | kMakeBlock);
  const uint64_t dev = (kReadFile | kWriteFile | kTruncate | kIoctlDev) & handled;
  int err = AddRule(fd, "/", read_exec);
  if (err == 0) err = AddRule(fd, "/workspace", read_write);
  if (err == 0) err = AddRule(fd, "/tmp", read_write);
  if (err == 0) err = AddRule(fd, "/dev", dev);
  if (err == 0 && abi >= 4 && connect_port != 0) {
    NetPortAttr port{kNetConnectTcp, connect_port};
    if (::syscall(SYS_landlock_add_rule, fd, kRuleNetPort, &port, 0) != 0) err = errno;
  }
  if (err == 0 && ::syscall(SYS_landlock_restrict_self, fd, 0) != 0) err = errno;
  ::close(fd);
  return err;
}

}  // namespace kiln::worker::sandbox
