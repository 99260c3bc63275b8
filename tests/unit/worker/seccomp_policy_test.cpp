// The seccomp policy's tables, checked on the compiled BPF: a small
// interpreter of the classic-BPF subset libseccomp emits runs both filters
// over seccomp_data the way the kernel does (every filter runs; the most
// restrictive action wins; with equal actions the later filter's). Every
// syscall number gets exactly the verdict its table row says, and each
// argument rule is checked with the values an attacker would try (high bits
// set on 32-bit arguments, neighbouring values). The same filters loaded
// into a real process are exercised by sandbox_test and the escape suite.
#include "worker/sandbox/seccomp_policy.hpp"

#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <sys/ioctl.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <map>
#include <set>
#include <string>

namespace kiln::worker::sandbox {
namespace {

constexpr uint32_t kArchX86_64 = AUDIT_ARCH_X86_64;
constexpr uint32_t kAllow = SECCOMP_RET_ALLOW;
// The kill list goes to the worker's listener, which kills the sandbox.
constexpr uint32_t kToTheWorker = SECCOMP_RET_USER_NOTIF;
constexpr uint32_t Errno(int e) { return SECCOMP_RET_ERRNO | static_cast<uint32_t>(e); }

// Classic BPF as libseccomp emits it. An instruction outside this subset
// fails the test rather than being guessed at.
uint32_t RunBpf(const std::vector<sock_filter>& prog, const seccomp_data& d) {
  uint32_t a = 0, x = 0, mem[BPF_MEMWORDS] = {};
  const auto* bytes = reinterpret_cast<const unsigned char*>(&d);
  for (size_t pc = 0; pc < prog.size(); ++pc) {
    const sock_filter& i = prog[pc];
    switch (i.code) {
      case BPF_LD | BPF_W | BPF_ABS:
        if (i.k + 4 > sizeof d) ADD_FAILURE() << "load out of seccomp_data at " << i.k;
        std::memcpy(&a, bytes + i.k, 4);
        break;
      case BPF_LD | BPF_MEM:
        a = mem[i.k];
        break;
      case BPF_LDX | BPF_MEM:
        x = mem[i.k];
        break;
      case BPF_ST:
        mem[i.k] = a;
        break;
      case BPF_STX:
        mem[i.k] = x;
        break;
      case BPF_ALU | BPF_AND | BPF_K:
        a &= i.k;
        break;
      case BPF_ALU | BPF_OR | BPF_K:
        a |= i.k;
        break;
      case BPF_MISC | BPF_TAX:
        x = a;
        break;
      case BPF_MISC | BPF_TXA:
        a = x;
        break;
      case BPF_JMP | BPF_JA:
        pc += i.k;
        break;
      case BPF_JMP | BPF_JEQ | BPF_K:
        pc += a == i.k ? i.jt : i.jf;
        break;
      case BPF_JMP | BPF_JGT | BPF_K:
        pc += a > i.k ? i.jt : i.jf;
        break;
      case BPF_JMP | BPF_JGE | BPF_K:
        pc += a >= i.k ? i.jt : i.jf;
        break;
      case BPF_JMP | BPF_JSET | BPF_K:
        pc += (a & i.k) != 0 ? i.jt : i.jf;
        break;
      case BPF_RET | BPF_K:
        return i.k;
      case BPF_RET | BPF_A:
        return a;
      default:
        ADD_FAILURE() << "unsupported BPF opcode 0x" << std::hex << i.code;
        return 0;
    }
  }
  ADD_FAILURE() << "fell off the end of the filter";
  return 0;
}

class SeccompPolicy : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto f = CompileSeccompFilters();
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    filters_ = new SeccompFilters(std::move(*f));
  }
  static void TearDownTestSuite() { delete filters_; }

  // The kernel's verdict with both filters installed (seccomp_run_filters):
  // the lowest action as a signed value wins, ties keep the newest filter's.
  static uint32_t Verdict(int nr, std::initializer_list<uint64_t> args = {},
                          uint32_t arch = kArchX86_64) {
    seccomp_data d{};
    d.nr = nr;
    d.arch = arch;
    size_t i = 0;
    for (uint64_t a : args) d.args[i++] = a;
    uint32_t ret = RunBpf(filters_->arguments, d);
    uint32_t older = RunBpf(filters_->syscalls, d);
    auto action = [](uint32_t r) { return static_cast<int32_t>(r & SECCOMP_RET_ACTION_FULL); };
    return action(older) < action(ret) ? older : ret;
  }
  static int Nr(const char* name) { return seccomp_syscall_resolve_name(name); }

  static SeccompFilters* filters_;
};
SeccompFilters* SeccompPolicy::filters_ = nullptr;

// Names this libseccomp may not know yet (newer than Debian 12's 2.5.4):
// they get the default until it does. Any other unknown name is a typo.
const std::set<std::string> kNewerThanLibseccomp = {
    "map_shadow_stack", "mseal",     "futex_wait", "futex_wake", "futex_requeue",
    "cachestat",        "fchmodat2", "statmount",  "listmount"};

TEST_F(SeccompPolicy, EveryNameIsARealSystemCallAndAppearsOnce) {
  std::map<std::string, int> seen;
  for (const SyscallRule& r : SyscallTable()) {
    EXPECT_EQ(++seen[r.name], 1) << r.name << " is in two tables";
    if (kNewerThanLibseccomp.count(r.name) == 0) {
      EXPECT_NE(Nr(r.name), __NR_SCMP_ERROR) << r.name << " is not a system call on x86_64";
    }
  }
  EXPECT_GT(seen.size(), 250u);
}

TEST_F(SeccompPolicy, EverySyscallNumberGetsItsTablesVerdictAndTheRestEnosys) {
  std::map<int, SyscallAction> by_nr;
  for (const SyscallRule& r : SyscallTable()) {
    int nr = Nr(r.name);
    if (nr >= 0) by_nr[nr] = r.action;
  }
  // Calls with argument rules are checked with their arguments below.
  const std::set<int> argument_ruled = {Nr("socket"), Nr("socketpair"), Nr("setsockopt"),
                                        Nr("ioctl"),  Nr("clone"),      Nr("personality")};
  int allowed = 0;
  for (int nr = 0; nr < 1024; ++nr) {
    if (argument_ruled.count(nr)) continue;
    uint32_t want = Errno(ENOSYS);
    if (auto it = by_nr.find(nr); it != by_nr.end()) {
      switch (it->second) {
        case SyscallAction::kAllow:
          want = kAllow;
          ++allowed;
          break;
        case SyscallAction::kPerm:
          want = Errno(EPERM);
          break;
        case SyscallAction::kNoSys:
          want = Errno(ENOSYS);
          break;
        case SyscallAction::kKill:
          want = kToTheWorker;
          break;
        case SyscallAction::kSucceedWithoutEffect:
          want = Errno(0);
          break;
      }
    }
    char* name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_X86_64, nr);
    EXPECT_EQ(Verdict(nr, {1, 2, 3, 4, 5, 6}), want) << nr << " " << (name ? name : "?");
    free(name);
  }
  EXPECT_GT(allowed, 200);
}

TEST_F(SeccompPolicy, NamedCallsHaveTheDocumentedVerdicts) {
  EXPECT_EQ(Verdict(Nr("read")), kAllow);
  EXPECT_EQ(Verdict(Nr("execve")), kAllow);
  EXPECT_EQ(Verdict(Nr("kexec_load")), kToTheWorker);
  EXPECT_EQ(Verdict(Nr("init_module")), kToTheWorker);
  EXPECT_EQ(Verdict(Nr("mount")), Errno(EPERM));
  EXPECT_EQ(Verdict(Nr("ptrace")), Errno(EPERM));
  EXPECT_EQ(Verdict(Nr("modify_ldt")), Errno(EPERM));
  EXPECT_EQ(Verdict(Nr("vmsplice")), Errno(EPERM));
  EXPECT_EQ(Verdict(Nr("bpf")), Errno(EPERM));
  EXPECT_EQ(Verdict(Nr("io_uring_setup")), Errno(ENOSYS));
  EXPECT_EQ(Verdict(Nr("io_setup")), Errno(ENOSYS));
  EXPECT_EQ(Verdict(Nr("io_submit")), Errno(ENOSYS));
  EXPECT_EQ(Verdict(Nr("clone3")), Errno(ENOSYS));
  EXPECT_EQ(Verdict(Nr("sync")), Errno(0));
  EXPECT_EQ(Verdict(Nr("get_mempolicy")), Errno(ENOSYS));  // not named: the default
  EXPECT_EQ(Verdict(1000), Errno(ENOSYS));                 // a call no kernel has yet
}

TEST_F(SeccompPolicy, ForeignArchitecturesAndTheX32AbiGoToTheKillList) {
  EXPECT_EQ(Verdict(Nr("read"), {}, AUDIT_ARCH_I386), kToTheWorker);
  EXPECT_EQ(Verdict(Nr("read"), {}, AUDIT_ARCH_AARCH64), kToTheWorker);
  EXPECT_EQ(Verdict(0x40000000 | Nr("read")), kToTheWorker);
  EXPECT_EQ(Verdict(0x40000000 | Nr("mount")), kToTheWorker);
}

TEST_F(SeccompPolicy, OnlyUnixInetInet6AndRoutingNetlinkSocketsExist) {
  const int socket = Nr("socket"), socketpair = Nr("socketpair");
  for (uint64_t af : {1, 2, 10}) {
    EXPECT_EQ(Verdict(socket, {af, 1, 0}), kAllow) << af;
    EXPECT_EQ(Verdict(socketpair, {af, 1, 0, 0}), kAllow) << af;
  }
  EXPECT_EQ(Verdict(socket, {16, 3, 0}), kAllow);  // NETLINK_ROUTE
  for (uint64_t af = 0; af < 64; ++af) {
    if (af == 1 || af == 2 || af == 10 || af == 16) continue;
    EXPECT_EQ(Verdict(socket, {af, 1, 0}), Errno(EAFNOSUPPORT)) << af;
    EXPECT_EQ(Verdict(socketpair, {af, 1, 0, 0}), Errno(EAFNOSUPPORT)) << af;
  }
  // AF_ALG, AF_VSOCK, AF_PACKET and the module-autoload families, spelled
  // with high bits (the kernel reads an int) or as huge values.
  for (uint64_t af : {38ull, 40ull, 17ull, 30ull, 21ull, 0x100000026ull, 0xffffffffull,
                      0x7fffffffffffffffull, 0x100000001ull}) {
    EXPECT_EQ(Verdict(socket, {af, 1, 0}), Errno(EAFNOSUPPORT)) << std::hex << af;
  }
  // Netlink: routing only. KOBJECT_UEVENT (15) is the host's uevent feed.
  for (uint64_t proto : {1ull, 4ull, 9ull, 12ull, 15ull, 16ull, 21ull, 31ull, 32ull, 0x10000000full,
                         0x100000000ull}) {
    EXPECT_EQ(Verdict(socket, {16, 3, proto}), Errno(EPROTONOSUPPORT)) << std::hex << proto;
    EXPECT_EQ(Verdict(socket, {0x100000010ull, 3, proto}), Errno(EPROTONOSUPPORT)) << proto;
  }
  // Protocol numbers of the allowed inet families are not netlink's.
  EXPECT_EQ(Verdict(socket, {2, 1, 6}), kAllow);
  EXPECT_EQ(Verdict(socket, {10, 2, 17}), kAllow);
}

TEST_F(SeccompPolicy, TcpUlpIsRefusedHowEverItIsSpelled) {
  const int setsockopt = Nr("setsockopt");
  EXPECT_EQ(Verdict(setsockopt, {3, 6, 31, 0, 4}), Errno(EPERM));
  EXPECT_EQ(Verdict(setsockopt, {3, 0x100000006ull, 0x10000001full, 0, 4}), Errno(EPERM));
  EXPECT_EQ(Verdict(setsockopt, {3, 6, 1, 0, 4}), kAllow);   // TCP_NODELAY
  EXPECT_EQ(Verdict(setsockopt, {3, 1, 31, 0, 4}), kAllow);  // SOL_SOCKET/SO_PASSSEC
  EXPECT_EQ(Verdict(setsockopt, {3, 0, 31, 0, 4}), kAllow);
}

TEST_F(SeccompPolicy, TerminalInjectionIoctlsAreRefused) {
  const int ioctl = Nr("ioctl");
  EXPECT_EQ(Verdict(ioctl, {0, TIOCSTI, 0}), Errno(EPERM));
  EXPECT_EQ(Verdict(ioctl, {0, 0xffffffff00000000ull | TIOCSTI, 0}), Errno(EPERM));
  EXPECT_EQ(Verdict(ioctl, {0, 0x541C, 0}), Errno(EPERM));  // TIOCLINUX
  EXPECT_EQ(Verdict(ioctl, {0, TCGETS, 0}), kAllow);
  EXPECT_EQ(Verdict(ioctl, {0, FIONREAD, 0}), kAllow);
}

TEST_F(SeccompPolicy, CloneMakesNoNamespacesAndPersonalityKeepsAslr) {
  const int clone = Nr("clone"), personality = Nr("personality");
  EXPECT_EQ(Verdict(clone, {0x01200011}), kAllow);  // fork(): CHILD_SETTID|CLEARTID|SIGCHLD
  EXPECT_EQ(Verdict(clone, {0x003d0f00}), kAllow);  // pthread_create's flags
  for (uint64_t ns :
       {0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000}) {
    EXPECT_EQ(Verdict(clone, {ns | 17}), Errno(EPERM)) << std::hex << ns;
  }
  EXPECT_EQ(Verdict(personality, {0}), kAllow);
  EXPECT_EQ(Verdict(personality, {0xffffffff}), Errno(EPERM));  // query spelled with all bits
  EXPECT_EQ(Verdict(personality, {0x0040000}), Errno(EPERM));   // ADDR_NO_RANDOMIZE
  EXPECT_EQ(Verdict(personality, {0x0400000}), Errno(EPERM));   // READ_IMPLIES_EXEC
}

}  // namespace
}  // namespace kiln::worker::sandbox
