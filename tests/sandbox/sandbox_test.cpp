// Sandbox tests: real processes in real namespaces, through the Sandbox API.
// Parameterized over the cgroup modes; a mode this host lacks is skipped
// with the reason (e.g. no memory/pids controller on the v2 hierarchy).
#include "worker/sandbox/sandbox.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "worker/runtimes/runtime.hpp"
#include "worker/sandbox/cgroups.hpp"
#include "worker/sandbox/contain.hpp"
#include "worker/sandbox/fs_util.hpp"
#include "worker/sandbox/namespaces.hpp"

namespace kiln::worker::sandbox {
namespace {

using common::UniqueFd;
using common::protocol::FileEntry;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kPython = "/usr/bin/python3";

struct RunResult {
  ExitStatus status;
  std::string out, err;
  uid_t uid = 0;  // the sandbox uid, read from inside when asked
};

struct RunOptions {
  std::string stdin_data;
  bool give_stdin = true;
  SandboxLimits limits;
  int timeout_ms = 20000;
  std::vector<std::string> env = {"PATH=/usr/bin:/bin", "LANG=C.UTF-8"};
  bool control_fd = false;
  // Called after Spawn, before stdin is written (warm-sandbox flow).
  std::function<void(SandboxProcess&)> before_input;
  // Called after Wait, before the process object is destroyed.
  std::function<void(SandboxProcess&)> after_exit;
  // SpawnSpec::zygote_argv: fork the program from this zygote.
  std::vector<std::string> zygote_argv;
};

// Pids on the host whose real uid is `uid`.
std::vector<pid_t> ProcessesWithUid(uid_t uid) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  while (struct dirent* e = ::readdir(d)) {
    pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream f(std::string("/proc/") + e->d_name + "/status");
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind("Uid:", 0) == 0) {
        std::istringstream in(line.substr(4));
        uid_t u;
        if (in >> u && u == uid) out.push_back(pid);
        break;
      }
    }
  }
  ::closedir(d);
  return out;
}

class SandboxTest : public ::testing::TestWithParam<std::string> {
 protected:
  static SandboxConfig ConfigFor(const std::string& mode) {
    SandboxConfig c;
    c.init_path = KILN_BINARY_DIR "/bin/kiln-init";
    c.state_dir = "/tmp/kiln-sandbox-test-" + mode;
    c.cgroup_mode = mode;
    c.cgroup_prefix = "kiln-test-" + mode;
    c.uid_base = mode == "v1" ? 320000 : 321000;
    c.uid_count = 200;
    c.workspace_bytes = 8ull << 20;
    c.tmp_bytes = 8ull << 20;
    return c;
  }

  // One Sandbox per mode for the whole binary (Create probes the host).
  static Sandbox* SandboxFor(const std::string& mode, std::string* why) {
    static std::mutex mu;
    static std::map<std::string, std::unique_ptr<Sandbox>> boxes;
    static std::map<std::string, std::string> errors;
    std::lock_guard<std::mutex> lock(mu);
    if (!boxes.count(mode) && !errors.count(mode)) {
      auto sb = Sandbox::Create(ConfigFor(mode));
      if (sb.ok()) {
        boxes[mode] = std::move(*sb);
      } else {
        errors[mode] = sb.status().ToString();
      }
    }
    if (errors.count(mode)) *why = errors[mode];
    return boxes.count(mode) ? boxes[mode].get() : nullptr;
  }

  void SetUp() override {
    std::string why;
    sandbox_ = SandboxFor(GetParam(), &why);
    if (sandbox_ == nullptr) {
      // v2 is optional on a host; v1 must work where its hierarchies are mounted.
      GTEST_SKIP() << "cgroup mode " << GetParam() << " is not available on this host: " << why;
    }
  }

  RunResult Run(std::vector<std::string> argv, RunOptions opt = {}) {
    int in[2], out[2], err[2], ctl[2];
    EXPECT_EQ(::pipe2(in, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(err, O_CLOEXEC), 0);
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl), 0);
    UniqueFd in_w(in[1]), out_r(out[0]), err_r(err[0]), ctl_parent(ctl[0]);
    SpawnSpec spec;
    spec.argv = std::move(argv);
    spec.env = opt.env;
    spec.limits = opt.limits;
    spec.zygote_argv = opt.zygote_argv;
    if (opt.give_stdin)
      spec.stdin_fd = UniqueFd(in[0]);
    else
      ::close(in[0]);
    spec.stdout_fd = UniqueFd(out[1]);
    spec.stderr_fd = UniqueFd(err[1]);
    if (opt.control_fd)
      spec.control_fd = UniqueFd(ctl[1]);
    else
      ::close(ctl[1]);
    auto proc = sandbox_->Spawn(std::move(spec));
    RunResult r;
    if (!proc.ok()) {
      ADD_FAILURE() << "Spawn: " << proc.status().ToString();
      return r;
    }
    if (opt.before_input) opt.before_input(**proc);
    if (!opt.stdin_data.empty()) {
      (void)!::write(in_w.get(), opt.stdin_data.data(), opt.stdin_data.size());
    }
    in_w.Reset();
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(opt.timeout_ms);
    bool killed = false;
    char buf[65536];
    struct pollfd p[2] = {{out_r.get(), POLLIN, 0}, {err_r.get(), POLLIN, 0}};
    while (p[0].fd >= 0 || p[1].fd >= 0) {
      int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      deadline - std::chrono::steady_clock::now())
                                      .count());
      if (left <= 0) {
        if (killed) break;
        (*proc)->Kill();
        killed = true;
        deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        continue;
      }
      if (::poll(p, 2, left) <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t n = ::read(p[i].fd, buf, sizeof buf);
        if (n <= 0) {
          p[i].fd = -1;
        } else {
          (i == 0 ? r.out : r.err).append(buf, static_cast<size_t>(n));
        }
      }
    }
    auto st = (*proc)->Wait();
    EXPECT_TRUE(st.ok()) << st.status().ToString();
    if (st.ok()) r.status = *st;
    if (opt.after_exit) opt.after_exit(**proc);
    return r;
  }

  RunResult Py(const std::string& code, RunOptions opt = {}) {
    return Run({kPython, "-c", code}, std::move(opt));
  }

  Sandbox* sandbox_ = nullptr;
};

#define EXPECT_EXIT0(r)                                  \
  EXPECT_EQ((r).status.exit_code, std::optional<int>(0)) \
      << "stdout: " << (r).out << "\nstderr: " << (r).err

TEST_P(SandboxTest, AllLayersActive) {
  std::vector<std::string> layers = sandbox_->ActiveLayers();
  EXPECT_EQ(layers.size(), std::size(kLayerNames));
}

TEST_P(SandboxTest, RunsPythonNodeBash) {
  RunResult py = Py("print(6*7)");
  EXPECT_EXIT0(py);
  EXPECT_EQ(py.out, "42\n");
  RunResult node = Run({"/usr/bin/node", "-e", "console.log(6*7)"});
  EXPECT_EXIT0(node);
  EXPECT_EQ(node.out, "42\n");
  RunResult sh =
      Run({"/bin/bash", "-c", "echo hi; cat /etc/hostname; ls / | wc -l; echo x > /dev/null"});
  EXPECT_EXIT0(sh);
  EXPECT_THAT(sh.out, HasSubstr("hi\nkiln\n"));
  RunResult cwd = Run({"/bin/pwd"});
  EXPECT_EQ(cwd.out, "/workspace\n");
}

TEST_P(SandboxTest, UnprivilegedIdentity) {
  RunResult r =
      Py("import os\n"
         "s = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines() if "
         "':\\t' in l)\n"
         "print(os.getuid(), os.geteuid(), os.getgid(), os.getgroups())\n"
         "for k in ['CapInh','CapPrm','CapEff','CapBnd','CapAmb','NoNewPrivs','Seccomp']: print(k, "
         "s[k].strip())\n");
  EXPECT_EXIT0(r);
  std::istringstream in(r.out);
  uid_t uid, euid, gid;
  in >> uid >> euid >> gid;
  EXPECT_GE(uid, 320000u);
  EXPECT_EQ(uid, euid);
  EXPECT_EQ(uid, gid);
  EXPECT_THAT(r.out, HasSubstr("[]\n"));  // no supplementary groups
  for (const char* cap : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}) {
    EXPECT_THAT(r.out, HasSubstr(std::string(cap) + " 0000000000000000\n"));
  }
  EXPECT_THAT(r.out, HasSubstr("NoNewPrivs 1\n"));
  EXPECT_THAT(r.out, HasSubstr("Seccomp 2\n"));
}

TEST_P(SandboxTest, EnvironmentIsExactlySpecEnv) {
  RunOptions opt;
  opt.env = {"A=1", "B=two words"};
  RunResult r = Run({"/usr/bin/env"}, opt);
  EXPECT_EXIT0(r);
  EXPECT_EQ(r.out, "A=1\nB=two words\n");
}

TEST_P(SandboxTest, OnlyStdioAndControlFdsAreOpen) {
  const char* code =
      "import os\n"
      "fds = []\n"
      "for fd in range(0, 4096):\n"
      "  try: os.fstat(fd); fds.append(fd)\n"
      "  except OSError: pass\n"
      "print(fds)\n";
  RunOptions with;
  with.control_fd = true;
  RunResult a = Py(code, with);
  EXPECT_EXIT0(a);
  EXPECT_EQ(a.out, "[0, 1, 2, 3]\n");
  RunResult b = Py(code);
  EXPECT_EQ(b.out, "[0, 1, 2]\n");
  // stdin not given: empty (/dev/null).
  RunOptions no_stdin;
  no_stdin.give_stdin = false;
  RunResult c = Py("import sys; print(repr(sys.stdin.read()))", no_stdin);
  EXPECT_EQ(c.out, "''\n");
}

TEST_P(SandboxTest, FilesystemViewIsMinimal) {
  std::string host_pid = std::to_string(::getpid());
  std::string init_cmdline;
  RunOptions opt;
  opt.before_input = [&](SandboxProcess& p) {
    // Spawn returns while the child may still be on its way to the exec.
    std::string path = "/proc/" + std::to_string(p.pid()) + "/cmdline";
    for (int i = 0; i < 200 && init_cmdline.rfind("/etc/kiln-init", 0) != 0; ++i) {
      if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      init_cmdline = ReadFileString(path).value_or("");
    }
  };
  RunResult r =
      Py("import os\n"
         "print(sorted(os.listdir('/')))\n"
         "print(sorted(os.listdir('/dev')))\n"
         "for p in ['/etc/shadow', '/etc/gshadow', '/root', '/home', '/run', '/var', '/srv', "
         "'/opt', '/sys',\n"
         "          '/work', '/tmp/kiln-sandbox-test-" +
             GetParam() + "', '/proc/" + host_pid +
             "', '/etc/ssl/private']:\n"
             "  print(p, os.path.exists(p))\n"
             "print('pid1 visible', os.path.exists('/proc/1'))\n"
             "print('self', os.getpid(), os.getppid(), "
             "open('/proc/self/cmdline').read().split('\\0')[0])\n"
             "print('environ', open('/proc/self/environ').read().replace('\\0', ' '))\n"
             "print('passwd', open('/etc/passwd').read().count('\\n'))\n",
         opt);
  EXPECT_EXIT0(r);
  EXPECT_THAT(r.out, HasSubstr("['bin', 'dev', 'etc', 'lib', 'lib32', 'lib64', 'packages', 'proc', "
                               "'sbin', 'tmp', 'usr', 'workspace']\n"));
  EXPECT_THAT(
      r.out,
      HasSubstr(
          "['fd', 'null', 'random', 'shm', 'stderr', 'stdin', 'stdout', 'urandom', 'zero']\n"));
  EXPECT_THAT(r.out, Not(HasSubstr(" True")));
  // pid 1 is kiln-init (worker/init), the program its child, with only the
  // job's environment. kiln-init is not dumpable, so hidepid hides it from
  // the job; the host sees what it is.
  EXPECT_EQ(init_cmdline.substr(0, init_cmdline.find('\0')), "/etc/kiln-init");
  EXPECT_THAT(r.out, HasSubstr("pid1 visible False\n"));
  EXPECT_THAT(r.out, HasSubstr("self 2 1 /usr/bin/python3\n"));
  EXPECT_THAT(r.out, HasSubstr("environ PATH=/usr/bin:/bin LANG=C.UTF-8 \n"));
  EXPECT_THAT(r.out, HasSubstr("passwd 3\n"));
}

// Host facts in /proc: masked (empty) where a job has no use for them, and
// the clocks that count from boot start at the sandbox's birth (a time
// namespace), so neither /proc/uptime nor /proc/stat's btime shows how long
// the host has been up. Controls: /proc/meminfo and /proc/self still read.
TEST_P(SandboxTest, HostFactsInProcAreHidden) {
  RunResult r =
      Py("import os, time\n"
         "for p in ['/proc/key-users', '/proc/cmdline', '/proc/interrupts', "
         "'/proc/sys/kernel/random/boot_id', '/proc/keys', '/proc/timer_list']:\n"
         "  print(p, repr(open(p).read()))\n"
         "print('pressure', os.listdir('/proc/pressure') if os.path.exists('/proc/pressure') "
         "else [])\n"
         "print('uptime', float(open('/proc/uptime').read().split()[0]))\n"
         "btime = [int(l.split()[1]) for l in open('/proc/stat') if l.startswith('btime')][0]\n"
         "print('boot_age', time.time() - btime)\n"
         "print('monotonic', time.monotonic())\n"
         "print('meminfo', open('/proc/meminfo').read().startswith('MemTotal'))\n"
         "print('self', os.readlink('/proc/self') == str(os.getpid()))\n");
  EXPECT_EXIT0(r);
  for (const char* p : {"/proc/key-users", "/proc/cmdline", "/proc/interrupts",
                        "/proc/sys/kernel/random/boot_id", "/proc/keys", "/proc/timer_list"}) {
    EXPECT_THAT(r.out, HasSubstr(std::string(p) + " ''\n")) << r.out;
  }
  EXPECT_THAT(r.out, HasSubstr("pressure []\n"));
  auto number_after = [&](const std::string& key) {
    size_t at = r.out.find(key + " ");
    return at == std::string::npos ? -1.0 : std::stod(r.out.substr(at + key.size() + 1));
  };
  // The sandbox is seconds old; the host (booted before this test built) is not.
  EXPECT_GE(number_after("uptime"), 0.0) << r.out;
  EXPECT_LT(number_after("uptime"), 30.0) << r.out;
  EXPECT_LT(number_after("boot_age"), 30.0) << r.out;
  EXPECT_LT(number_after("monotonic"), 30.0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("meminfo True\nself True\n"));
}

TEST_P(SandboxTest, WritesOnlyInWorkspaceAndTmp) {
  RunResult r =
      Py("import os\n"
         "for p in ['/x', '/etc/x', '/usr/x', '/usr/bin/python3', '/etc/passwd', '/dev/x', "
         "'/proc/sys/kernel/hostname',\n"
         "          '/proc/sysrq-trigger', '/lib/x']:\n"
         "  try:\n"
         "    open(p, 'w').write('1'); print('WROTE', p)\n"
         "  except OSError as e: print('denied', p, e.errno)\n"
         "for p in ['/workspace/a', '/tmp/a', '/dev/null']:\n"
         "  open(p, 'w').write('ok'); print('ok', p)\n"
         "os.mkdir('/workspace/d'); os.symlink('/etc', '/workspace/d/l')\n");
  EXPECT_EXIT0(r);
  EXPECT_THAT(r.out, Not(HasSubstr("WROTE")));
  EXPECT_THAT(r.out, HasSubstr("ok /workspace/a\nok /tmp/a\nok /dev/null\n"));
}

TEST_P(SandboxTest, WorkspaceAndTmpAreSizeCapped) {
  RunResult r =
      Py("import os, errno\n"
         "for d in ['/workspace', '/tmp']:\n"
         "  try:\n"
         "    with open(d + '/big', 'wb') as f:\n"
         "      for _ in range(32): f.write(b'x' * (1 << 20))\n"
         "    print(d, 'no limit')\n"
         "  except OSError as e: print(d, errno.errorcode[e.errno])\n"
         "  os.unlink(d + '/big')\n");
  EXPECT_EXIT0(r);
  EXPECT_EQ(r.out, "/workspace ENOSPC\n/tmp ENOSPC\n");
}

// Empty files cost no bytes: the inode cap bounds them (one per 4 KiB).
TEST_P(SandboxTest, WorkspaceAndTmpAreInodeCapped) {
  const uint64_t cap = TmpfsInodesFor(8ull << 20);  // ConfigFor: 8 MiB each
  RunResult r =
      Py("import os, errno\n"
         "for d in ['/workspace', '/tmp']:\n"
         "  n = 0\n"
         "  try:\n"
         "    while n < " +
         std::to_string(cap * 2) +
         ":\n"
         "      os.close(os.open(f'{d}/f{n}', os.O_CREAT | os.O_WRONLY)); n += 1\n"
         "    print(d, 'no limit')\n"
         "  except OSError as e: print(d, errno.errorcode[e.errno], n <= " +
         std::to_string(cap) + ")\n");
  EXPECT_EXIT0(r);
  EXPECT_EQ(r.out, "/workspace ENOSPC True\n/tmp ENOSPC True\n");
}

TEST_P(SandboxTest, NetworkIsLoopbackOnlyAndHostUnreachable) {
  int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(lfd, 0);
  UniqueFd listener(lfd);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(lfd, 8), 0);
  socklen_t len = sizeof addr;
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len);
  int port = ntohs(addr.sin_port);
  RunResult r =
      Py("import socket\n"
         "print(socket.if_nameindex())\n"
         "s = socket.socket(); s.settimeout(2)\n"
         "try:\n"
         "  s.connect(('127.0.0.1', " +
         std::to_string(port) +
         ")); print('CONNECTED')\n"
         "except OSError as e: print('refused', e.errno)\n"
         "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
         "try:\n"
         "  u.sendto(b'x', ('8.8.8.8', 53)); print('SENT')\n"
         "except OSError as e: print('unreachable', e.errno)\n"
         "try:\n"
         "  socket.socket(40, socket.SOCK_STREAM); print('VSOCK')\n"
         "except OSError as e: print('vsock', e.errno)\n");
  EXPECT_EXIT0(r);
  EXPECT_THAT(r.out, HasSubstr("[(1, 'lo')]\n"));
  EXPECT_THAT(r.out, HasSubstr("refused"));
  EXPECT_THAT(r.out, HasSubstr("unreachable"));
  EXPECT_THAT(r.out, HasSubstr("vsock 97"));
  EXPECT_THAT(r.out, Not(HasSubstr("CONNECTED")));
  // Nothing reached the host listener.
  ::fcntl(lfd, F_SETFL, O_NONBLOCK);
  EXPECT_LT(::accept(lfd, nullptr, nullptr), 0);
}

TEST_P(SandboxTest, DangerousSyscallsAreRefused) {
  RunResult r =
      Py("import ctypes, os\n"
         "libc = ctypes.CDLL(None, use_errno=True)\n"
         "def call(name, nr, *args):\n"
         "  ctypes.set_errno(0)\n"
         "  rc = libc.syscall(nr, *[ctypes.c_long(a) for a in args])\n"
         "  print(name, rc, ctypes.get_errno())\n"
         "call('ptrace', 101, 16, 1, 0, 0)\n"  // PTRACE_ATTACH to pid 1
         "call('mount', 165, 0, 0, 0, 0, 0)\n"
         "call('umount2', 166, 0, 0)\n"
         "call('unshare', 272, 0x10000000)\n"  // CLONE_NEWUSER
         "call('setns', 308, 0, 0)\n"
         "call('bpf', 321, 0, 0, 0)\n"
         "call('perf_event_open', 298, 0, 0, -1, -1, 0)\n"
         "call('keyctl', 250, 0, 0)\n"
         "call('add_key', 248, 0, 0, 0, 0, 0)\n"
         "call('userfaultfd', 323, 0)\n"
         "call('pivot_root', 155, 0, 0)\n"
         "call('open_by_handle_at', 304, 0, 0, 0)\n"
         "call('clone_newns', 56, 0x00020000 | 17, 0, 0, 0, 0)\n"
         "call('clone_newnet', 56, 0x40000000 | 17, 0, 0, 0, 0)\n"
         "call('personality', 135, 0x0040000)\n"
         "call('syslog', 103, 3, 0, 0)\n"
         "call('io_uring_setup', 425, 1, 0)\n"
         "call('clone3', 435, 0, 0)\n");
  EXPECT_EXIT0(r);
  for (const char* name :
       {"ptrace", "mount", "umount2", "unshare", "setns", "bpf", "perf_event_open", "keyctl",
        "add_key", "userfaultfd", "pivot_root", "open_by_handle_at", "clone_newns", "clone_newnet",
        "personality", "syslog"}) {
    EXPECT_THAT(r.out, HasSubstr(std::string(name) + " -1 1\n")) << name;  // EPERM
  }
  EXPECT_THAT(r.out, HasSubstr("io_uring_setup -1 38\n"));  // ENOSYS
  EXPECT_THAT(r.out, HasSubstr("clone3 -1 38\n"));
}

// The kill list: the worker's listener sees the call, kills the whole
// sandbox and names the call — whichever process of the sandbox made it.
TEST_P(SandboxTest, NeverLegitimateSyscallsKillTheSandbox) {
  struct Case {
    const char* call;
    const char* violation;
  };
  for (Case c : {
           Case{"libc.syscall(246, 0, 0, 0, 0)", "kexec_load"},
           Case{"libc.syscall(175, 0, 0, 0)", "init_module"},
           Case{"libc.syscall(169, 0, 0, 0, 0)", "reboot"},
           Case{"libc.syscall(0x40000000 | 165, 0, 0, 0, 0, 0)",  // mount via the x32 ABI
                "a system call of a foreign ABI (arch 0xc000003e, nr 1073741989)"},
       }) {
    RunResult r = Py(std::string("import ctypes; libc = ctypes.CDLL(None); ") + c.call +
                     "; print('SURVIVED')");
    EXPECT_EQ(r.status.signal, std::optional<int>(SIGKILL)) << c.call << " " << r.out;
    EXPECT_TRUE(r.status.seccomp_killed) << c.call;
    EXPECT_EQ(r.status.violation, c.violation) << c.call;
    EXPECT_THAT(r.out, Not(HasSubstr("SURVIVED")));
  }
}

// A child process's violation ends the sandbox too (a kernel SIGSYS would
// have gone to the job's own code, the child's parent, and been lost).
TEST_P(SandboxTest, AViolationByAChildProcessIsReportedAndEndsTheSandbox) {
  RunResult r =
      Py("import subprocess, time\n"
         "p = subprocess.run(['/usr/bin/python3', '-c', "
         "'import ctypes; ctypes.CDLL(None).syscall(175, 0, 0, 0)'])\n"
         "print('PARENT CARRIED ON', p.returncode, flush=True)\n"
         "time.sleep(5)\n");
  EXPECT_TRUE(r.status.seccomp_killed) << r.out << r.err;
  EXPECT_EQ(r.status.violation, "init_module");
  EXPECT_EQ(r.status.signal, std::optional<int>(SIGKILL));
  EXPECT_THAT(r.out, Not(HasSubstr("PARENT CARRIED ON")));
}

TEST_P(SandboxTest, SetuidBinariesDoNotRaisePrivileges) {
  RunResult r =
      Run({"/bin/bash", "-c",
           "ls -l /usr/bin/su | cut -c1-10; grep ' /usr ' /proc/self/mountinfo | grep -c nosuid; "
           "/usr/bin/su root -c 'id -u' </dev/null; echo su=$?; /usr/bin/newgrp root </dev/null; "
           "echo newgrp=$?"});
  EXPECT_THAT(r.out, HasSubstr("-rwsr-xr-x\n1\n"));  // the bit is there, the mount ignores it
  EXPECT_THAT(r.out, Not(HasSubstr("\n0\n")));
  EXPECT_THAT(r.out, Not(HasSubstr("su=0")));
  EXPECT_THAT(r.out, Not(HasSubstr("newgrp=0")));
}

TEST_P(SandboxTest, ForkBombIsBoundedByPidsLimit) {
  RunOptions opt;
  opt.limits.max_pids = 24;
  RunResult r =
      Py("import os, time\n"
         "n = 0\n"
         "try:\n"
         "  while n < 1000:\n"
         "    if os.fork() == 0:\n"
         "      time.sleep(60); os._exit(0)\n"
         "    n += 1\n"
         "except OSError as e: print('stopped', n, e.errno, flush=True)\n",
         opt);
  EXPECT_EXIT0(r);
  std::istringstream in(r.out);
  std::string word;
  int n = 0;
  in >> word >> n;
  EXPECT_EQ(word, "stopped");
  EXPECT_LT(n, 24);
  EXPECT_GT(n, 5);
}

TEST_P(SandboxTest, KillEndsEveryProcessIncludingDaemons) {
  RunOptions opt;
  opt.timeout_ms = 1500;  // then Run() calls Kill()
  RunResult r =
      Py("import os, sys, time\n"
         "print(os.getuid(), flush=True)\n"
         "if os.fork() == 0:\n"  // double fork + setsid: a daemon
         "  os.setsid()\n"
         "  if os.fork() == 0:\n"
         "    os.close(1); os.close(2); time.sleep(100)\n"
         "  os._exit(0)\n"
         "os.system('sleep 100 &')\n"
         "time.sleep(100)\n",
         opt);
  uid_t uid = static_cast<uid_t>(std::atoi(r.out.c_str()));
  ASSERT_GE(uid, 320000u);
  EXPECT_EQ(r.status.signal, std::optional<int>(SIGKILL));
  EXPECT_TRUE(ProcessesWithUid(uid).empty());
}

TEST_P(SandboxTest, DaemonsDieWhenPid1Exits) {
  RunResult r =
      Py("import os, time\n"
         "print(os.getuid(), flush=True)\n"
         "if os.fork() == 0:\n"
         "  os.setsid()\n"
         "  if os.fork() == 0:\n"
         "    os.close(1); os.close(2); time.sleep(100)\n"
         "  os._exit(0)\n"
         "time.sleep(0.2)\n");
  EXPECT_EXIT0(r);
  uid_t uid = static_cast<uid_t>(std::atoi(r.out.c_str()));
  ASSERT_GE(uid, 320000u);
  EXPECT_TRUE(ProcessesWithUid(uid).empty());
}

// kiln-init as pid 1: the program is an ordinary process (it can signal
// itself), SIGTERM to pid 1 reaches the program, and orphans are reaped.
TEST_P(SandboxTest, TheProgramIsAnOrdinaryProcessUnderKilnInit) {
  RunResult self =
      Py("import os\nprint('before', flush=True)\nos.kill(os.getpid(), 9)\n"
         "print('after')\n");
  EXPECT_EQ(self.out, "before\n");
  EXPECT_EQ(self.status.signal, std::optional<int>(SIGKILL));
  EXPECT_FALSE(self.status.seccomp_killed);

  RunResult exit_code = Py("import sys\nsys.exit(7)\n");
  EXPECT_EQ(exit_code.status.exit_code, std::optional<int>(7));

  RunResult term =
      Py("import os, signal, subprocess, time\n"
         "signal.signal(signal.SIGTERM, lambda *a: (print('got SIGTERM', flush=True), "
         "os._exit(3)))\n"
         "subprocess.run(['/bin/kill', '-TERM', '1'])\n"
         "time.sleep(5)\nprint('not forwarded')\n");
  EXPECT_EQ(term.out, "got SIGTERM\n");
  EXPECT_EQ(term.status.exit_code, std::optional<int>(3));

  // An orphan (its parent exits at once) ends and is reaped by pid 1: no
  // zombie is left in the namespace.
  RunResult orphan =
      Py("import os, time\n"
         "pid = os.fork()\n"
         "if pid == 0:\n"
         "  if os.fork() == 0:\n"
         "    time.sleep(0.2); os._exit(0)\n"
         "  os._exit(0)\n"
         "os.waitpid(pid, 0)\n"
         "time.sleep(1)\n"
         "states = [open('/proc/%s/stat' % p).read().split(')')[1].split()[0]\n"
         "          for p in os.listdir('/proc') if p.isdigit()]\n"
         "print(sorted(states))\n");
  EXPECT_EXIT0(orphan);
  EXPECT_THAT(orphan.out, Not(HasSubstr("'Z'"))) << orphan.out;
}

// A session's program is stopped after every execution and continued before
// the next; kiln-init (SA_NOCLDSTOP) is not woken by either, only by ends.
TEST_P(SandboxTest, StoppingAndContinuingTheProgramDoesNotWakeInit) {
  auto status_field = [](pid_t pid, const std::string& key) -> long {
    std::string text = ReadFileString("/proc/" + std::to_string(pid) + "/status").value_or("");
    size_t at = text.find("\n" + key + ":");
    return at == std::string::npos ? -1 : std::atol(text.c_str() + at + key.size() + 2);
  };
  auto state = [](pid_t pid) {
    std::string stat = ReadFileString("/proc/" + std::to_string(pid) + "/stat").value_or("");
    size_t paren = stat.rfind(')');
    return paren == std::string::npos || paren + 2 >= stat.size() ? '?' : stat[paren + 2];
  };
  auto until = [](const std::function<bool()>& done) {
    for (int i = 0; i < 5000; ++i) {
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
  };
  long woken = -1;
  RunOptions opt;
  opt.stdin_data = "go";
  opt.before_input = [&](SandboxProcess& p) {
    const pid_t init = p.pid();
    const std::string children =
        "/proc/" + std::to_string(init) + "/task/" + std::to_string(init) + "/children";
    pid_t program = 0;
    for (int i = 0; i < 500 && program <= 0; ++i) {
      if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      program = static_cast<pid_t>(std::atoi(ReadFileString(children).value_or("").c_str()));
    }
    ASSERT_GT(program, 0);
    auto switches = [&] {
      return status_field(init, "voluntary_ctxt_switches") +
             status_field(init, "nonvoluntary_ctxt_switches");
    };
    const long before = switches();
    for (int i = 0; i < 20; ++i) {
      ASSERT_EQ(::kill(program, SIGSTOP), 0);
      ASSERT_TRUE(until([&] { return state(program) == 'T'; }));
      ASSERT_EQ(::kill(program, SIGCONT), 0);
      ASSERT_TRUE(until([&] { return state(program) != 'T'; }));
    }
    woken = switches() - before;
  };
  RunResult r = Py("import sys\nprint(sys.stdin.read())\n", opt);
  EXPECT_EXIT0(r);
  EXPECT_EQ(r.out, "go\n");
  EXPECT_GE(woken, 0);
  EXPECT_LT(woken, 5) << "kiln-init woke for stops and continues of its program";
}

TEST_P(SandboxTest, KillMinusOneDoesNotReachTheHost) {
  pid_t sentinel;
  const char* argv[] = {"/bin/sleep", "30", nullptr};
  char* envp[] = {nullptr};
  ASSERT_EQ(::posix_spawn(&sentinel, argv[0], nullptr, nullptr, const_cast<char**>(argv), envp), 0);
  // kill(-1) reaches every process of the namespace but its init and the
  // caller: the program itself (kiln-init's child) and its other children.
  RunResult r =
      Py("import os, signal, subprocess, time\n"
         "s = subprocess.Popen(['/bin/sleep', '30'])\n"
         "print('ready', flush=True)\n"
         "if os.fork() == 0:\n"
         "  os.kill(-1, signal.SIGKILL); os._exit(0)\n"
         "s.wait(); print('survived', s.returncode)\n");
  EXPECT_EQ(r.out, "ready\n");  // inside its own namespace it works
  EXPECT_EQ(r.status.signal, std::optional<int>(SIGKILL)) << r.out << r.err;
  EXPECT_EQ(::kill(sentinel, 0), 0) << "the host process was killed from inside the sandbox";
  ::kill(sentinel, SIGKILL);
  ::waitpid(sentinel, nullptr, 0);
}

TEST_P(SandboxTest, MemoryBombIsOomKilled) {
  RunOptions opt;
  opt.limits.memory_bytes = 64ull << 20;
  RunResult r = Py("b = bytearray(400 << 20)\nprint('ALLOCATED')\n", opt);
  EXPECT_EQ(r.status.signal, std::optional<int>(SIGKILL)) << r.out << r.err;
  EXPECT_TRUE(r.status.oom_killed);
  EXPECT_THAT(r.out, Not(HasSubstr("ALLOCATED")));
  EXPECT_GT(r.status.max_rss_kb, 32u * 1024);
  // And a normal run is not flagged.
  RunResult ok = Py("print(1)");
  EXPECT_FALSE(ok.status.oom_killed);
}

// Sandboxes that are never frozen share pooled cgroups (cgroup_pool.hpp):
// what one used is not counted in the next, whichever cgroup it gets.
TEST_P(SandboxTest, NothingOfTheLastSandboxIsCountedInTheNext) {
  RunResult busy =
      Py("import time\n"
         "held = b'x' * (48 << 20)\n"
         "t = time.process_time()\n"
         "while time.process_time() - t < 0.4: pass\n");
  ASSERT_EQ(busy.status.exit_code, std::optional<int>(0)) << busy.err;
  EXPECT_GE(busy.status.cpu_ms, 350);
  EXPECT_GE(busy.status.max_rss_kb, 48u << 10);
  for (int i = 0; i < 3; ++i) {
    RunResult next = Py("print(1)");
    ASSERT_EQ(next.out, "1\n") << next.err;
    EXPECT_LT(next.status.cpu_ms, 250) << i;
    EXPECT_LT(next.status.max_rss_kb, 40u << 10) << i;
    EXPECT_FALSE(next.status.oom_killed) << i;
  }
}

TEST_P(SandboxTest, CpuSpinIsStoppedByRlimitCpu) {
  RunOptions opt;
  opt.limits.cpu_ms = 1000;
  auto t0 = std::chrono::steady_clock::now();
  RunResult r = Py("while True: pass", opt);
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(r.status.signal.has_value());
  EXPECT_TRUE(*r.status.signal == SIGXCPU || *r.status.signal == SIGKILL) << *r.status.signal;
  EXPECT_GE(r.status.cpu_ms, 900);
  EXPECT_LT(wall, 10);
}

// What the worker's kiln_worker_sandbox_* metrics read: the prefix cgroup
// holds what its sandboxes use now, and keeps their CPU once they are gone.
TEST_P(SandboxTest, CgroupUsageCoversSandboxesAndKeepsTheirCpu) {
  const CgroupManager* cgroups = sandbox_->cgroups();
  ASSERT_NE(cgroups, nullptr);
  const CgroupUsage before = cgroups->Usage();
  ASSERT_TRUE(before.memory_bytes.has_value());
  ASSERT_TRUE(before.cpu_seconds.has_value());
  constexpr uint64_t kHeld = 48ull << 20;
  CgroupUsage running;
  RunOptions opt;
  opt.stdin_data = "x";
  opt.before_input = [&](SandboxProcess&) {
    // The sandbox holds 48 MiB and spins for 0.6 s of CPU, then waits for stdin.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    do {
      running = cgroups->Usage();
      if (running.memory_bytes.value_or(0) >= kHeld &&
          running.cpu_seconds.value_or(0) >= *before.cpu_seconds + 0.5) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } while (std::chrono::steady_clock::now() < deadline);
  };
  RunResult r =
      Py("import sys, time\n"
         "held = b'x' * (48 << 20)\n"
         "t = time.process_time()\n"
         "while time.process_time() - t < 0.6: pass\n"
         "sys.stdin.read()\n"
         "print(len(held))\n",
         opt);
  EXPECT_EXIT0(r);
  EXPECT_EQ(r.out, std::to_string(kHeld) + "\n");
  EXPECT_GE(running.memory_bytes.value_or(0), kHeld);
  EXPECT_GE(running.cpu_seconds.value_or(0), *before.cpu_seconds + 0.5);
  EXPECT_LT(running.cpu_seconds.value_or(0), *before.cpu_seconds + 5) << "seconds, not ms";
  // The sandbox is gone: its memory is no longer charged, its CPU still counts.
  const CgroupUsage after = cgroups->Usage();
  ASSERT_TRUE(after.memory_bytes.has_value());
  ASSERT_TRUE(after.cpu_seconds.has_value());
  EXPECT_LT(*after.memory_bytes + kHeld / 2, running.memory_bytes.value_or(0));
  EXPECT_GE(*after.cpu_seconds, running.cpu_seconds.value_or(0));
}

TEST_P(SandboxTest, TmpIsPrivatePerSandbox) {
  RunResult a =
      Py("open('/tmp/marker', 'w').write('secret'); open('/workspace/marker', 'w').write('s')");
  EXPECT_EXIT0(a);
  RunResult b =
      Py("import os; print(os.path.exists('/tmp/marker'), os.listdir('/workspace'), "
         "os.listdir('/tmp'))");
  EXPECT_EQ(b.out, "False [] []\n");
}

TEST_P(SandboxTest, OtherSandboxWorkspaceIsInvisible) {
  int in[2], out[2];
  ASSERT_EQ(::pipe2(in, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
  UniqueFd in_w(in[1]), out_r(out[0]);
  SpawnSpec spec;
  spec.argv = {kPython, "-c", "import sys; sys.stdin.read()"};
  spec.stdin_fd = UniqueFd(in[0]);
  spec.stdout_fd = UniqueFd(out[1]);
  auto a = sandbox_->Spawn(std::move(spec));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE((*a)->AddFiles({{"secret.txt", "TOPSECRET"}}).ok());
  std::string ws = (*a)->workspace_path();
  RunResult b =
      Py("import os\n"
         "print(os.path.exists('" +
         ws +
         "'), os.listdir('/workspace'))\n"
         "hits = []\n"
         "for root, dirs, files in os.walk('/'):\n"
         "  if root.startswith('/proc') or root.startswith('/usr') or root.startswith('/sys'): "
         "dirs[:] = []; continue\n"
         "  hits += [f for f in files if f == 'secret.txt']\n"
         "print(hits)\n");
  EXPECT_EQ(b.out, "False []\n[]\n");
  in_w.Reset();
  auto st = (*a)->Wait();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->exit_code, std::optional<int>(0));
}

TEST_P(SandboxTest, WarmSandboxGetsLimitsAndFilesLater) {
  SandboxLimits job;
  job.cpu_ms = 5000;
  job.memory_bytes = 128ull << 20;
  job.max_pids = 16;
  RunOptions opt;
  opt.stdin_data =
      "import os, resource\n"
      "print(open('in/data.txt').read())\n"
      "print(resource.getrlimit(resource.RLIMIT_CPU)[0] <= 6, os.stat('in/data.txt').st_uid == "
      "os.getuid(), resource.getrlimit(resource.RLIMIT_NPROC))\n"
      "os.makedirs('out', exist_ok=True)\n"
      "open('out/result.txt', 'w').write('RESULT')\n"
      "open('other.bin', 'w').write('x' * 100)\n"
      "os.symlink('/etc/hostname', 'out/link.txt')\n";
  std::vector<FileEntry> collected;
  opt.before_input = [&](SandboxProcess& p) {
    EXPECT_TRUE(p.SetLimits(job).ok());
    EXPECT_TRUE(p.AddFiles({{"in/data.txt", "hello from the job"}}).ok());
    EXPECT_EQ(p.AddFiles({{"../escape", "x"}}).code(), common::Code::kInvalidRequest);
    EXPECT_EQ(p.AddFiles({{"/etc/escape", "x"}}).code(), common::Code::kInvalidRequest);
  };
  opt.after_exit = [&](SandboxProcess& p) {
    auto files = p.CollectFiles({"out/*"}, 1 << 20);
    ASSERT_TRUE(files.ok()) << files.status().ToString();
    collected = files->files;
    EXPECT_FALSE(files->truncated());
    auto none = p.CollectFiles({"*"}, 5);  // budget too small for any file
    ASSERT_TRUE(none.ok());
    EXPECT_TRUE(none->files.empty());
    EXPECT_GT(none->omitted, 0u);
    EXPECT_TRUE(none->truncated());
  };
  RunResult r = Run({kPython, "-c", "import sys; exec(sys.stdin.read())"}, opt);
  EXPECT_EXIT0(r);
  EXPECT_EQ(r.out, "hello from the job\nTrue True (16, 16)\n");
  ASSERT_EQ(collected.size(), 1u);  // the symlink is not followed
  EXPECT_EQ(collected[0].path, "out/result.txt");
  EXPECT_EQ(collected[0].content, "RESULT");
}

// A session sets its limits before every execution: the same ones again
// are skipped once settled (linux_sandbox.cpp), other ones still apply.
TEST_P(SandboxTest, LimitsSetAgainAreKeptAndOtherLimitsStillApply) {
  SandboxLimits first;
  first.cpu_ms = 7ull * 24 * 3600 * 1000;  // clamped to the spawn's hard limit: settled
  first.max_pids = 16;
  first.open_files = 64;
  SandboxLimits second = first;
  second.max_pids = 8;
  second.open_files = 32;
  RunOptions opt;
  opt.stdin_data =
      "import resource\n"
      "print(resource.getrlimit(resource.RLIMIT_NPROC), "
      "resource.getrlimit(resource.RLIMIT_NOFILE))\n";
  opt.before_input = [&](SandboxProcess& p) {
    EXPECT_TRUE(p.SetLimits(first).ok());
    EXPECT_TRUE(p.SetLimits(first).ok());
    EXPECT_TRUE(p.SetLimits(second).ok());
  };
  RunResult r = Run({kPython, "-c", "import sys; exec(sys.stdin.read())"}, opt);
  EXPECT_EXIT0(r);
  EXPECT_EQ(r.out, "(8, 8) (32, 32)\n");
}

// A worker without CAP_SYS_RESOURCE cannot prlimit a process of another uid:
// SetLimits switches the calling thread's real uid and gid to the sandbox's
// for the calls, and back. Here the calling thread drops the capability
// from its effective set (capset is per thread), so that path is what
// applies the limits; the thread ends with its own ids and capabilities.
TEST_P(SandboxTest, WarmSandboxGetsLimitsWithoutCapSysResource) {
  SandboxLimits job;
  job.cpu_ms = 3000;
  job.max_pids = 12;
  RunOptions opt;
  opt.stdin_data =
      "import resource\n"
      "print(resource.getrlimit(resource.RLIMIT_CPU)[0] <= 4, "
      "resource.getrlimit(resource.RLIMIT_NPROC))\n";
  opt.before_input = [&](SandboxProcess& p) {
    common::Status st = common::Status::Ok();
    bool dropped = false;
    std::thread t([&] {
      __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
      __user_cap_data_struct data[2]{};
      if (::syscall(SYS_capget, &hdr, data) != 0) return;
      data[CAP_SYS_RESOURCE / 32].effective &= ~(1u << (CAP_SYS_RESOURCE % 32));
      if (::syscall(SYS_capset, &hdr, data) != 0) return;
      dropped = true;
      st = p.SetLimits(job);
      uid_t ids[3];
      gid_t gids[3];
      ASSERT_EQ(::getresuid(&ids[0], &ids[1], &ids[2]), 0);
      ASSERT_EQ(::getresgid(&gids[0], &gids[1], &gids[2]), 0);
      EXPECT_EQ(std::vector<uid_t>(ids, ids + 3), std::vector<uid_t>(3, 0));
      EXPECT_EQ(std::vector<gid_t>(gids, gids + 3), std::vector<gid_t>(3, 0));
      __user_cap_data_struct after[2]{};
      ASSERT_EQ(::syscall(SYS_capget, &hdr, after), 0);
      EXPECT_EQ(after[0].effective, data[0].effective);
      EXPECT_EQ(after[0].permitted, data[0].permitted);
    });
    t.join();
    ASSERT_TRUE(dropped) << "capset: " << std::strerror(errno);
    EXPECT_TRUE(st.ok()) << st.ToString();
  };
  RunResult r = Run({kPython, "-c", "import sys; exec(sys.stdin.read())"}, opt);
  EXPECT_EXIT0(r);
  EXPECT_EQ(r.out, "True (12, 12)\n");
}

TEST_P(SandboxTest, AddFilesRefusesSymlinkEscapes) {
  std::string before = ReadFileString("/etc/hostname").value();
  RunOptions opt;
  opt.stdin_data = "x";
  opt.before_input = [&](SandboxProcess& p) {
    // Let the sandbox plant a symlink first.
    for (int i = 0; i < 200 && !PathExists(p.workspace_path() + "/link"); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_FALSE(p.AddFiles({{"link/hostname", "PWNED"}}).ok());
    EXPECT_FALSE(p.AddFiles({{"file", "PWNED"}}).ok());
  };
  RunResult r =
      Py("import os, sys\nos.symlink('/etc', 'link'); os.symlink('/etc/hostname', "
         "'file')\nsys.stdin.read()\n",
         opt);
  EXPECT_EXIT0(r);
  EXPECT_EQ(ReadFileString("/etc/hostname").value(), before);
}

// Host-side writes never block on, follow or write through what the sandbox
// put at a path: a FIFO (with or without a reader), a unix socket, a
// directory, a FIFO where a directory is expected. Before, a FIFO blocked the
// worker thread in open() for good.
TEST_P(SandboxTest, AddFilesRefusesSpecialFilesWithoutBlocking) {
  RunOptions opt;
  opt.stdin_data = "x";
  std::vector<common::Status> refused;
  common::Status regular = common::Status::Ok();
  std::atomic<bool> blocked{false};
  opt.before_input = [&](SandboxProcess& p) {
    const std::string ws = p.workspace_path();
    for (int i = 0; i < 500 && !PathExists(ws + "/ready"); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(PathExists(ws + "/ready"));
    std::atomic<bool> done{false};
    std::thread watchdog([&] {  // releases a blocked open(), so the test ends
      for (int i = 0; i < 500 && !done; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (done) return;
      blocked = true;
      for (const char* f : {"/d.csv", "/read.fifo", "/sub"}) {
        int fd = ::open((ws + f).c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd >= 0) ::close(fd);
      }
    });
    for (const char* path : {"d.csv", "read.fifo", "sock", "dir", "sub/x"}) {
      refused.push_back(p.AddFiles({{path, "data"}}));
    }
    regular = p.AddFiles({{"plain.txt", "data"}});
    done = true;
    watchdog.join();
  };
  RunResult r =
      Py("import os, socket, sys, threading\n"
         "os.mkfifo('d.csv'); os.mkfifo('read.fifo'); os.mkfifo('sub'); os.mkdir('dir')\n"
         "s = socket.socket(socket.AF_UNIX); s.bind('sock')\n"
         "threading.Thread(target=lambda: open('read.fifo').read(), daemon=True).start()\n"
         "open('ready', 'w').close()\n"
         "sys.stdin.read()\n"
         "print(open('plain.txt').read(), os.path.isfile('d.csv'))\n",
         opt);
  EXPECT_FALSE(blocked) << "AddFiles blocked on a special file";
  ASSERT_EQ(refused.size(), 5u);
  for (const common::Status& st : refused) {
    EXPECT_EQ(st.code(), common::Code::kInvalidRequest) << st.ToString();
  }
  EXPECT_TRUE(regular.ok()) << regular.ToString();
  EXPECT_EQ(r.out, "data False\n");
}

// A frozen sandbox uses no CPU until thawed, whatever it runs (a session
// between executions), and is still killed at once. Only a freezable spawn
// can be frozen on v1 (the freezer is one more hierarchy to join).
// A process's state letter from /proc/<pid>/stat ('T': stopped), '?' if gone.
char ProcState(pid_t pid) {
  std::string stat = ReadFileString("/proc/" + std::to_string(pid) + "/stat").value_or("");
  size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() ? '?' : stat[paren + 2];
}

// Every process below `root` (children, their children, ...).
std::vector<pid_t> Descendants(pid_t root) {
  std::multimap<pid_t, pid_t> children;  // ppid -> pid
  DIR* d = ::opendir("/proc");
  while (struct dirent* e = ::readdir(d)) {
    pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::string stat = ReadFileString(std::string("/proc/") + e->d_name + "/stat").value_or("");
    size_t paren = stat.rfind(')');
    long ppid = 0;
    if (paren != std::string::npos && std::sscanf(stat.c_str() + paren + 1, " %*c %ld", &ppid) == 1)
      children.emplace(static_cast<pid_t>(ppid), pid);
  }
  ::closedir(d);
  std::vector<pid_t> out;
  std::vector<pid_t> todo{root};
  while (!todo.empty()) {
    pid_t p = todo.back();
    todo.pop_back();
    auto [first, last] = children.equal_range(p);
    for (auto it = first; it != last; ++it) {
      out.push_back(it->second);
      todo.push_back(it->second);
    }
  }
  return out;
}

TEST_P(SandboxTest, FreezeStopsEveryProcessUntilThawed) {
  auto spin = [&](bool freezable) {
    SpawnSpec spec;
    spec.argv = {kPython, "-c",
                 "import os\n"
                 "if os.fork() == 0:\n"  // a second process, busy too
                 "  os.setsid()\n"
                 "while True: pass\n"};
    spec.env = {"PATH=/usr/bin:/bin"};
    spec.limits.max_pids = 8;
    spec.freezable = freezable;
    return sandbox_->Spawn(std::move(spec));
  };
  auto cpu_over = [](SandboxProcess& p, std::chrono::milliseconds window) {
    double before = p.Usage().cpu_ms;
    std::this_thread::sleep_for(window);
    return p.Usage().cpu_ms - before;
  };
  auto proc = spin(true);
  ASSERT_TRUE(proc.ok()) << proc.status().ToString();
  SandboxProcess& p = **proc;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // both spinning
  ASSERT_GT(cpu_over(p, std::chrono::milliseconds(300)), 50) << "not spinning";
  ASSERT_TRUE(p.Freeze(true).ok());
  EXPECT_LT(cpu_over(p, std::chrono::milliseconds(500)), 5) << "ran while frozen";
  if (std::string(GetParam()) == "v1") {
    // The job's processes are stopped; kiln-init (pid 1), which runs nothing
    // of the job's, is left waiting for signals rather than stopped and
    // woken for nothing on every freeze and thaw.
    const std::vector<pid_t> job = Descendants(p.pid());
    EXPECT_EQ(job.size(), 2u);  // the program and its child
    for (pid_t pid : job) EXPECT_EQ(ProcState(pid), 'T') << pid;
    EXPECT_NE(ProcState(p.pid()), 'T');
  }
  ASSERT_TRUE(p.Freeze(false).ok());
  EXPECT_GT(cpu_over(p, std::chrono::milliseconds(300)), 50) << "not running after the thaw";
  ASSERT_TRUE(p.Freeze(true).ok());
  auto killed_at = std::chrono::steady_clock::now();
  p.Kill();
  auto st = p.Wait();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->signal, std::optional<int>(SIGKILL));
  EXPECT_LT(std::chrono::steady_clock::now() - killed_at, std::chrono::seconds(5));

  if (std::string(GetParam()) == "v1") {
    auto plain = spin(false);
    ASSERT_TRUE(plain.ok()) << plain.status().ToString();
    EXPECT_EQ((*plain)->Freeze(true).code(), common::Code::kUnavailable);
  }
}

// A frozen sandbox still dies with its worker: the parent-death SIGKILL (sent
// when the thread that spawned it ends) must not wait for a thaw that never
// comes. Before, v1-frozen sessions outlived a killed worker for good,
// holding memory and a uid the host lock said was free.
TEST_P(SandboxTest, AFrozenSandboxDiesWithItsWorker) {
  std::unique_ptr<SandboxProcess> proc;
  std::promise<void> spawned, may_exit;
  std::thread spawner([&] {
    SpawnSpec spec;
    spec.argv = {kPython, "-c", "import os\nos.fork()\nwhile True: pass\n"};
    spec.env = {"PATH=/usr/bin:/bin"};
    spec.freezable = true;
    auto p = sandbox_->Spawn(std::move(spec));
    if (p.ok()) proc = std::move(*p);
    spawned.set_value();
    may_exit.get_future().wait();  // then this thread ends: the parent-death signal
  });
  spawned.get_future().wait();
  if (!proc) {
    may_exit.set_value();
    spawner.join();
    FAIL() << "spawn failed";
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_TRUE(proc->Freeze(true).ok());
  may_exit.set_value();
  spawner.join();
  pollfd p{proc->exit_fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 5000), 1) << "the frozen sandbox outlived the thread that spawned it";
  auto st = proc->Wait();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->signal, std::optional<int>(SIGKILL));
}

TEST_P(SandboxTest, ConcurrentSpawnsFromManyThreads) {
  std::vector<std::thread> threads;
  std::mutex mu;
  std::vector<std::string> outs;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      RunResult r = Run({"/bin/bash", "-c", "id -u"});
      std::lock_guard<std::mutex> lock(mu);
      outs.push_back(r.out);
    });
  }
  for (auto& t : threads) t.join();
  std::set<std::string> distinct(outs.begin(), outs.end());
  EXPECT_EQ(outs.size(), 8u);
  EXPECT_EQ(distinct.size(), 8u);  // every live sandbox has its own uid
}

TEST_P(SandboxTest, MissingProgramIsAClearError) {
  SpawnSpec spec;
  spec.argv = {"/usr/bin/no-such-runtime"};
  auto p = sandbox_->Spawn(std::move(spec));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), common::Code::kRuntimeUnavailable);
  EXPECT_THAT(p.status().message(), HasSubstr("execve"));
  SpawnSpec rel;
  rel.argv = {"python3"};
  EXPECT_EQ(sandbox_->Spawn(std::move(rel)).status().code(), common::Code::kInvalidRequest);
}

// --- Zygote-born sandboxes (zygote.hpp) ---------------------------------------

size_t Words(const std::string& s) {
  std::istringstream in(s);
  size_t n = 0;
  for (std::string w; in >> w;) ++n;
  return n;
}

// This process's zygotes: its children running python_zygote.py.
std::vector<pid_t> OwnZygotes() {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  while (struct dirent* e = ::readdir(d)) {
    pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream stat(std::string("/proc/") + e->d_name + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    size_t paren = text.rfind(')');
    long ppid = 0;
    if (paren == std::string::npos ||
        std::sscanf(text.c_str() + paren + 1, " %*c %ld", &ppid) != 1 || ppid != ::getpid()) {
      continue;
    }
    std::ifstream cmd(std::string("/proc/") + e->d_name + "/cmdline");
    std::string line((std::istreambuf_iterator<char>(cmd)), std::istreambuf_iterator<char>());
    if (line.find("kiln_zygote_spawn") == std::string::npos) continue;
    // Not a clone still running its contain steps (it has the zygote's
    // command line and, through CLONE_PARENT, our pid as parent): that one
    // is pid 1 of its own pid namespace (NSpid lists two pids).
    std::ifstream status(std::string("/proc/") + e->d_name + "/status");
    bool own_namespace = false;
    for (std::string l; std::getline(status, l);) {
      if (l.rfind("NSpid:", 0) == 0) own_namespace = Words(l.substr(6)) > 1;
    }
    if (!own_namespace) out.push_back(pid);
  }
  ::closedir(d);
  return out;
}

// A python one-shot job through the wrapper, forked from the zygote.
RunOptions ZygoteJob(const std::string& code) {
  auto rt = runtimes::Runtime::Create(runtimes::Language::kPython, {});
  EXPECT_TRUE(rt.ok());
  runtimes::Launch launch = rt->OneShotLaunch();
  RunOptions opt;
  opt.env = launch.env;
  opt.zygote_argv = launch.zygote_argv;
  opt.control_fd = true;
  opt.stdin_data = *rt->EncodeJob(code, "", {});
  return opt;
}
std::vector<std::string> OneShotArgv() {
  return runtimes::Runtime::Create(runtimes::Language::kPython, {})->OneShotLaunch().argv;
}

TEST_P(SandboxTest, ZygoteBornJobsGetTheJobsLimits) {
  const std::string probe =
      "import os, resource\n"
      "print(os.path.exists('/proc/self/maps') and any(l.rstrip().endswith('libkiln-zygote.so') "
      "for l in open('/proc/self/maps')), resource.getrlimit(resource.RLIMIT_CPU)[0] <= 3)\n";
  RunOptions opt = ZygoteJob(probe);
  SandboxLimits job;
  job.cpu_ms = 2000;
  job.memory_bytes = 64ull << 20;
  opt.before_input = [&](SandboxProcess& p) { EXPECT_TRUE(p.SetLimits(job).ok()); };
  RunResult r = Run(OneShotArgv(), opt);
  EXPECT_EXIT0(r);
  EXPECT_EQ(r.out, "True True\n") << r.err;

  // The job's memory limit applies to the forked interpreter.
  RunOptions bomb = ZygoteJob("b = bytearray(400 << 20)\nprint('allocated')\n");
  bomb.before_input = [&](SandboxProcess& p) { EXPECT_TRUE(p.SetLimits(job).ok()); };
  RunResult oom = Run(OneShotArgv(), bomb);
  EXPECT_TRUE(oom.status.oom_killed) << oom.out << oom.err;
  EXPECT_THAT(oom.out, Not(HasSubstr("allocated")));
}

// Packages on request: a host folder mounted into a running sandbox at
// /packages, read-only; a second mount replaces the first; the job can
// neither write to it nor take it away. Exec'd and zygote-born alike.
TEST_P(SandboxTest, PackagesAreMountedReadOnlyIntoARunningSandbox) {
  char tmpl[] = "/tmp/kiln-pkgs-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  ::chmod(dir.c_str(), 0755);
  for (const char* set : {"one", "two"}) {
    ASSERT_EQ(::mkdir((dir + "/" + set).c_str(), 0755), 0);
    std::ofstream(dir + "/" + set + "/" + set + ".py") << "X = 1\n";
  }
  const std::string probe =
      "import errno, os, ctypes\n"
      "print(sorted(os.listdir('/packages')))\n"
      "try:\n"
      "    open('/packages/new.py', 'w')\n"
      "except OSError as e:\n"
      "    print(errno.errorcode[e.errno])\n"
      "libc = ctypes.CDLL(None, use_errno=True)\n"
      "print(libc.umount2(b'/packages', 2), errno.errorcode[ctypes.get_errno()])\n";
  for (bool zygote : {false, true}) {
    SCOPED_TRACE(zygote ? "zygote-born" : "exec'd");
    RunOptions opt = zygote ? ZygoteJob(probe) : RunOptions{};
    if (!zygote) opt.stdin_data = probe;
    opt.before_input = [&](SandboxProcess& p) {
      ASSERT_TRUE(p.MountPackages(dir + "/one").ok());
      common::Status st = p.MountPackages(dir + "/two");  // replaces "one"
      EXPECT_TRUE(st.ok()) << st.ToString();
    };
    RunResult r = zygote ? Run(OneShotArgv(), opt)
                         : Run({kPython, "-c", "import sys; exec(sys.stdin.read())"}, opt);
    EXPECT_EXIT0(r);
    // seccomp refuses umount2 outright (EPERM); without it, no capability would.
    EXPECT_THAT(r.out, ::testing::StartsWith("['two.py']\nEROFS\n-1 EPERM\n")) << r.err;
  }
  // Nothing of the sandbox's mount reached the host.
  EXPECT_FALSE(PathExists("/packages/two.py"));
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST_P(SandboxTest, AKilledZygoteIsReplacedAndItsSandboxesLiveOn) {
  // A sandbox from the current zygote, waiting for its job.
  RunOptions first = ZygoteJob("print('first')");
  std::vector<pid_t> before;
  first.before_input = [&](SandboxProcess&) {
    before = OwnZygotes();
    ASSERT_EQ(before.size(), 1u);
    ::kill(before[0], SIGKILL);
    ASSERT_TRUE([&] {
      for (int i = 0; i < 500; ++i) {
        if (OwnZygotes() != before) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      return false;
    }()) << "the killed zygote is still there";
  };
  RunResult r = Run(OneShotArgv(), first);
  EXPECT_EXIT0(r);
  EXPECT_EQ(r.out, "first\n") << "a sandbox died with its zygote: " << r.err;
  // The next sandbox comes from a new zygote.
  RunResult next = Run(OneShotArgv(), ZygoteJob("print('next')"));
  EXPECT_EXIT0(next);
  EXPECT_EQ(next.out, "next\n") << next.err;
  std::vector<pid_t> after = OwnZygotes();
  ASSERT_EQ(after.size(), 1u);
  EXPECT_NE(after[0], before[0]);
}

TEST_P(SandboxTest, APlanTheZygoteRefusesIsExecdInstead) {
  // 1.2 MB of environment: over the zygote's bound for a plan (1 MiB), well
  // within what execve takes. The zygote answers EINVAL; the sandbox is
  // exec'd, and the zygote keeps serving.
  const std::string probe =
      "import os\nprint(any(l.rstrip().endswith('libkiln-zygote.so') for l in "
      "open('/proc/self/maps')), len(os.environ['BIG0']))\n";
  RunOptions big = ZygoteJob(probe);
  for (int i = 0; i < 20; ++i)
    big.env.push_back("BIG" + std::to_string(i) + "=" + std::string(60000, 'x'));
  RunResult r = Run(OneShotArgv(), big);
  EXPECT_EXIT0(r);
  EXPECT_EQ(r.out, "False 60000\n") << r.err;
  RunResult next = Run(OneShotArgv(), ZygoteJob(probe.substr(0, probe.find(", len(")) + ")\n"));
  EXPECT_EXIT0(next);
  EXPECT_EQ(next.out, "True\n") << next.err;
}

TEST_P(SandboxTest, AZygoteBornSandboxThatCannotContainItselfSaysWhere) {
  // A sandbox whose read-only bind vanished after Create: its mount step
  // fails in the zygote's clone, which reports the step over the status
  // pipe; the first call that needs the sandbox gets the same error an
  // exec'd spawn gets from Spawn itself.
  const std::string dir = "/var/tmp/kiln-sandbox-test-vanishing-" + GetParam();
  ::rmdir(dir.c_str());
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  SandboxConfig config = ConfigFor(GetParam());
  config.state_dir += "-vanishing";
  config.cgroup_prefix += "-vanishing";
  config.uid_base += 500;
  config.ro_binds = {dir};
  auto sb = Sandbox::Create(config);
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  ASSERT_EQ(::rmdir(dir.c_str()), 0);

  auto rt = runtimes::Runtime::Create(runtimes::Language::kPython, {});
  ASSERT_TRUE(rt.ok());
  runtimes::Launch launch = rt->OneShotLaunch();
  SpawnSpec spec;
  spec.argv = launch.argv;
  spec.env = launch.env;
  spec.zygote_argv = launch.zygote_argv;
  auto proc = (*sb)->Spawn(std::move(spec));
  ASSERT_TRUE(proc.ok()) << proc.status().ToString();
  EXPECT_TRUE((*proc)->zygote_born());
  common::Status st = (*proc)->SetLimits(SandboxLimits{});
  EXPECT_EQ(st.code(), common::Code::kInternal) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr("step 'mount tree' (layer filesystem)"));
  EXPECT_THAT(st.message(), HasSubstr("No such file or directory"));
  auto exit = (*proc)->Wait();
  EXPECT_FALSE(exit.ok());
  EXPECT_EQ(exit.status().message(), st.message());

  SpawnSpec exec_spec;
  exec_spec.argv = launch.argv;
  exec_spec.env = launch.env;
  auto exec = (*sb)->Spawn(std::move(exec_spec));
  ASSERT_FALSE(exec.ok());
  EXPECT_THAT(exec.status().message(), HasSubstr("step 'mount tree' (layer filesystem)"));
}

TEST_P(SandboxTest, ConcurrentZygoteSpawnsFromManyThreads) {
  std::vector<std::future<RunResult>> runs;
  for (int i = 0; i < 12; ++i) {
    runs.push_back(std::async(std::launch::async, [this, i] {
      return Run(OneShotArgv(),
                 ZygoteJob("import os\nprint(" + std::to_string(i) + ", os.getpid())"));
    }));
  }
  for (int i = 0; i < 12; ++i) {
    RunResult r = runs[i].get();
    EXPECT_EXIT0(r);
    EXPECT_EQ(r.out, std::to_string(i) + " 2\n") << r.err;
  }
}

INSTANTIATE_TEST_SUITE_P(CgroupModes, SandboxTest, ::testing::Values("v1", "v2"),
                         [](const auto& info) { return info.param; });

// --- The spawned child's descriptors -----------------------------------------

// Polls `read` (up to 10 s) until it returns a non-empty string.
std::string WaitFor(const std::function<std::string()>& read) {
  for (int i = 0; i < 1000; ++i) {
    std::string s = read();
    if (!s.empty()) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return "";
}

// A descriptor the worker closes while a spawn is in flight is closed for
// real. A warm wrapper starts its job at EOF on stdin, which needs every copy
// of the pipe's write end gone; a spawn's child used to hold a copy of every
// worker descriptor through its slow steps (cgroup attach, pivot_root), so a
// job next to a spawn waited for them (docs/performance.md, "Warm-job
// cost"). Here the child is held at its cgroup join by a full pipe standing
// in for cgroup.procs, which is after the step that must have dropped them.
TEST(SandboxChild, HoldsOnlyThePlanDescriptorsFromItsFirstStep) {
  int sentinel[2], gate[2];
  ASSERT_EQ(::pipe2(sentinel, O_CLOEXEC | O_NONBLOCK), 0);
  ASSERT_EQ(::pipe2(gate, O_CLOEXEC | O_NONBLOCK), 0);
  UniqueFd sentinel_r(sentinel[0]), sentinel_w(sentinel[1]), gate_r(gate[0]), gate_w(gate[1]);
  while (::write(gate_w.get(), "x", 1) == 1) {
  }
  ASSERT_EQ(errno, EAGAIN);
  ASSERT_EQ(::fcntl(gate_w.get(), F_SETFL, 0), 0);  // the child's write blocks

  const int cgroup_fd = gate_w.get();
  const char* argv[] = {"/bin/true", nullptr};
  const char* envp[] = {nullptr};
  ChildPlan plan;
  plan.cgroup_fds = &cgroup_fd;
  plan.cgroup_fd_count = 1;
  plan.cgroup_ns = plan.uts_ns = plan.net_ns = plan.landlock = plan.seccomp = false;
  plan.new_root = "/nonexistent-kiln-test-root";  // the child stops at the mount tree
  plan.argv = argv;
  plan.envp = envp;

  std::atomic<pid_t> spawner_tid{0};
  pid_t child = -1;
  int pidfd = -1;
  std::thread spawner([&] {
    spawner_tid = static_cast<pid_t>(::syscall(SYS_gettid));
    child = CloneVforked(CLONE_NEWNS, ContainAndExec, &plan, &pidfd);
  });
  // On every path out of this test, failed assertions included: open the
  // gate, so the child goes on (and stops at the mount tree), and join.
  auto release = [&] {
    char buf[4096];
    while (::read(gate_r.get(), buf, sizeof buf) > 0) {
    }
    if (spawner.joinable()) spawner.join();
  };
  struct Finally {
    std::function<void()> run;
    ~Finally() { run(); }
  } finally{release};

  std::string child_pid = WaitFor([&] {
    if (spawner_tid == 0) return std::string();
    auto s = ReadFileString("/proc/self/task/" + std::to_string(spawner_tid) + "/children");
    return s.ok() ? std::string(*s) : std::string();
  });
  ASSERT_FALSE(child_pid.empty()) << "the child never appeared";
  child_pid = child_pid.substr(0, child_pid.find(' '));
  // Blocked in write(2) on the gate: syscall 1 on x86-64 (the number is
  // only a readiness hint; the assertions below hold either way).
  WaitFor([&] {
    auto s = ReadFileString("/proc/" + child_pid + "/syscall");
    return s.ok() && s->rfind(std::to_string(SYS_write) + " ", 0) == 0 ? std::string("x")
                                                                       : std::string();
  });

  std::vector<std::string> fds;
  DIR* d = ::opendir(("/proc/" + child_pid + "/fd").c_str());
  ASSERT_NE(d, nullptr);
  while (struct dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') fds.push_back(e->d_name);
  }
  ::closedir(d);
  EXPECT_EQ(fds, std::vector<std::string>({std::to_string(cgroup_fd)}));
  sentinel_w.Reset();
  char c;
  EXPECT_EQ(::read(sentinel_r.get(), &c, 1), 0) << "the child still holds the write end";

  release();
  ASSERT_GT(child, 0);
  ASSERT_NE(plan.failed_step, nullptr);
  EXPECT_STREQ(plan.failed_step, "mount tree");
  siginfo_t info{};
  EXPECT_EQ(::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED), 0);
  if (pidfd >= 0) ::close(pidfd);
}

// --- Create(): config validation, relaxed layers, stale leftovers ----------

TEST(SandboxCreate, RejectsUnknownRelaxedLayerAndBadConfig) {
  SandboxConfig c;
  c.init_path = KILN_BINARY_DIR "/bin/kiln-init";
  c.state_dir = "/tmp/kiln-sandbox-test-create";
  c.relaxed_layers = {"bogus"};
  auto sb = Sandbox::Create(c);
  ASSERT_FALSE(sb.ok());
  EXPECT_EQ(sb.status().code(), common::Code::kInvalidRequest);
  c.relaxed_layers = {};
  c.state_dir = "relative";
  EXPECT_EQ(Sandbox::Create(c).status().code(), common::Code::kInvalidRequest);
  c.state_dir = "/tmp/kiln-sandbox-test-create";
  c.ro_binds = {"/etc/../etc/shadow"};
  EXPECT_EQ(Sandbox::Create(c).status().code(), common::Code::kInvalidRequest);
}

TEST(SandboxCreate, MissingCgroupV2NamesTheLayerUnlessRelaxed) {
  auto v2 = CreateCgroupV2(CgroupOptions{.mode = "v2", .prefix = "kiln-test-probe"});
  if (v2.ok()) GTEST_SKIP() << "this host has a full cgroup v2 hierarchy";
  SandboxConfig c;
  c.init_path = KILN_BINARY_DIR "/bin/kiln-init";
  c.state_dir = "/tmp/kiln-sandbox-test-relax";
  c.cgroup_prefix = "kiln-test-relax";
  c.cgroup_mode = "v2";
  c.uid_base = 322000;
  auto sb = Sandbox::Create(c);
  ASSERT_FALSE(sb.ok());
  EXPECT_THAT(sb.status().message(), HasSubstr("sandbox layer 'cgroups'"));
  c.relaxed_layers = {"cgroups"};
  auto relaxed = Sandbox::Create(c);
  ASSERT_TRUE(relaxed.ok()) << relaxed.status().ToString();
  std::vector<std::string> layers = (*relaxed)->ActiveLayers();
  EXPECT_EQ(std::count(layers.begin(), layers.end(), "cgroups"), 0);
  EXPECT_EQ(std::count(layers.begin(), layers.end(), "seccomp"), 1);
  // Non-relaxable layers stay required even when named.
  c.relaxed_layers = {"filesystem"};
  EXPECT_THAT(Sandbox::Create(c).status().message(), HasSubstr("'cgroups'"));
}

// Two workers on one host whose uid ranges overlap (here: the same single
// uid) never run two sandboxes as one uid: the host-wide lock on the uid
// makes the second wait its turn, with a clear error meanwhile.
TEST(SandboxUids, AUidIsLockedAcrossWorkersOnTheHost) {
  auto config = [](const std::string& name) {
    SandboxConfig c;
    c.init_path = KILN_BINARY_DIR "/bin/kiln-init";
    c.state_dir = "/tmp/kiln-sandbox-test-" + name;
    c.cgroup_prefix = "kiln-test-" + name;
    c.uid_base = 325000;
    c.uid_count = 1;
    c.uid_lock_dir = "/tmp/kiln-sandbox-test-uid-locks";
    return c;
  };
  auto a = Sandbox::Create(config("uid-a"));
  if (!a.ok()) GTEST_SKIP() << a.status().ToString();
  auto b = Sandbox::Create(config("uid-b"));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  auto spawn = [](Sandbox& sb) {
    SpawnSpec spec;
    spec.argv = {"/bin/sleep", "30"};
    return sb.Spawn(std::move(spec));
  };
  auto first = spawn(**a);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto refused = spawn(**b);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), common::Code::kUnavailable);
  EXPECT_THAT(refused.status().message(), HasSubstr("other workers on this host"));
  first->reset();  // ends the sandbox and gives the uid back
  auto second = spawn(**b);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_FALSE(spawn(**a).ok()) << "the first worker's pool reused a uid held elsewhere";
}

// When only `lo` cannot be brought up, relaxing net_ns keeps the network
// namespace (no interface up: no network at all) instead of running jobs on
// the host's network. The failure is real: the thread that creates the
// sandbox carries a seccomp filter that refuses SIOCSIFFLAGS, and the
// clone()d children inherit it.
TEST(SandboxCreate, RelaxedNetNsKeepsTheNamespaceWhenOnlyLoopbackFails) {
  SandboxConfig c;
  c.init_path = KILN_BINARY_DIR "/bin/kiln-init";
  c.state_dir = "/tmp/kiln-sandbox-test-nolo";
  c.cgroup_prefix = "kiln-test-nolo";
  c.uid_base = 326000;
  c.uid_count = 20;
  common::StatusOr<std::unique_ptr<Sandbox>> strict = common::Internal("not run");
  common::StatusOr<std::unique_ptr<Sandbox>> relaxed = common::Internal("not run");
  std::string filter_error;
  std::thread t([&] {
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (ctx == nullptr || seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0) != 0 ||
        seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                         SCMP_A1(SCMP_CMP_EQ, SIOCSIFFLAGS)) != 0 ||
        seccomp_load(ctx) != 0) {
      filter_error = "cannot load the test's seccomp filter";
    }
    if (ctx != nullptr) seccomp_release(ctx);
    if (!filter_error.empty()) return;
    strict = Sandbox::Create(c);
    c.relaxed_layers = {"net_ns"};
    relaxed = Sandbox::Create(c);
  });
  t.join();
  ASSERT_TRUE(filter_error.empty()) << filter_error;
  ASSERT_FALSE(strict.ok());
  EXPECT_THAT(strict.status().message(), HasSubstr("loopback"));
  EXPECT_THAT(strict.status().message(), HasSubstr("layer 'net_ns'"));
  ASSERT_TRUE(relaxed.ok()) << relaxed.status().ToString();
  std::vector<std::string> layers = (*relaxed)->ActiveLayers();
  EXPECT_EQ(std::count(layers.begin(), layers.end(), "net_ns"), 1);

  // A job (spawned from this thread, no filter) is in a namespace of its
  // own, where no interface is up and nothing can be reached.
  int out[2];
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
  UniqueFd out_r(out[0]);
  SpawnSpec spec;
  spec.argv = {"/usr/bin/python3", "-c",
               "import os, socket\n"
               "print(os.readlink('/proc/self/ns/net'))\n"
               "import fcntl, struct\n"
               "s = socket.socket()\n"
               "flags = struct.unpack('16sH', fcntl.ioctl(s, 0x8913, struct.pack('16sH', b'lo', "
               "0)))[1]\n"  // SIOCGIFFLAGS
               "print([n for _, n in socket.if_nameindex()], flags & 1)\n"
               "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"  // Landlock: TCP only
               "try:\n  u.connect(('127.0.0.1', 9)); print('connected')\n"
               "except OSError as e: print('no network', e.errno)\n"};
  spec.stdout_fd = UniqueFd(out[1]);
  spec.stderr_fd = UniqueFd(::dup(out[1]));
  auto job = (*relaxed)->Spawn(std::move(spec));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto st = (*job)->Wait();
  ASSERT_TRUE(st.ok());
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(out_r.get(), buf, sizeof buf)) > 0;) text.append(buf, n);
  char host_ns[64] = {};
  ASSERT_GT(::readlink("/proc/self/ns/net", host_ns, sizeof host_ns - 1), 0);
  std::istringstream lines(text);
  std::string ns, ifaces, reach;
  std::getline(lines, ns);
  std::getline(lines, ifaces);
  std::getline(lines, reach);
  EXPECT_NE(ns, host_ns) << text;
  EXPECT_EQ(ifaces, "['lo'] 0") << text;  // only lo, and it is down
  EXPECT_EQ(reach, "no network " + std::to_string(ENETUNREACH)) << text;
}

TEST(SandboxCreate, CleansUpStaleLeftovers) {
  SandboxConfig c;
  c.init_path = KILN_BINARY_DIR "/bin/kiln-init";
  c.state_dir = "/tmp/kiln-sandbox-test-stale";
  c.cgroup_prefix = "kiln-test-stale";
  c.cgroup_mode = "v1";
  c.uid_base = 323000;
  {
    auto first = Sandbox::Create(c);
    if (!first.ok()) GTEST_SKIP() << first.status().ToString();
  }
  // A previous worker (pid 999999999 cannot exist) left a workspace mount and a cgroup.
  std::string ws = c.state_dir + "/ws/999999999-7";
  ASSERT_TRUE(MakeDirs(ws, 0700).ok());
  ASSERT_EQ(::system(("mount -t tmpfs -o size=1m tmpfs " + ws).c_str()), 0);
  std::string cg = "/sys/fs/cgroup/memory/kiln-test-stale/999999999-7";
  ASSERT_TRUE(MakeDirs(cg, 0755).ok());
  auto second = Sandbox::Create(c);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_FALSE(PathExists(ws));
  EXPECT_FALSE(PathExists(cg));
}

// The v2 driver's mechanics (create, join, stats, cgroup.kill, remove) on
// whatever v2 hierarchy this host has, even without memory/pids/cpu. (A
// freezable cgroup: named for its sandbox and removed with it, not pooled.)
TEST(CgroupV2, JoinKillAndRemoveOnThisHost) {
  if (FindCgroup2Mount().empty()) GTEST_SKIP() << "no cgroup2 mount on this host";
  auto manager = CreateCgroupV2(
      CgroupOptions{.mode = "v2", .prefix = "kiln-test-v2mech", .require_controllers = false});
  ASSERT_TRUE(manager.ok()) << manager.status().ToString();
  auto cg = (*manager)->CreateFor("1-1", SandboxLimits{}, true);
  ASSERT_TRUE(cg.ok()) << cg.status().ToString();
  const CgroupUsage before = (*manager)->Usage();
  ASSERT_TRUE(before.cpu_seconds.has_value()) << "cpu.stat needs no controller";
  int join = (*cg)->join_fds().at(0).get();
  pid_t child = ::fork();
  if (child == 0) {
    if (::write(join, "0", 1) != 1) _exit(3);
    volatile long sink = 0;
    for (long i = 0; i < 50000000; ++i) sink = sink + i;
    ::pause();
    _exit(0);
  }
  std::string dir = FindCgroup2Mount() + "/kiln-test-v2mech/1-1";
  bool joined = false;
  for (int i = 0; i < 200 && !joined; ++i) {
    auto procs = ReadFileString(dir + "/cgroup.procs");
    joined = procs.ok() && procs->find(std::to_string(child)) != std::string::npos;
    if (!joined) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(joined);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  (*cg)->KillAll();
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  CgroupStats stats = (*cg)->Stats();
  ASSERT_TRUE(stats.cpu_ms.has_value());
  EXPECT_GT(*stats.cpu_ms, 1.0);
  // The prefix counts the child's CPU, and still does once its cgroup is gone.
  const CgroupUsage usage = (*manager)->Usage();
  ASSERT_TRUE(usage.cpu_seconds.has_value());
  EXPECT_GE(*usage.cpu_seconds - *before.cpu_seconds, *stats.cpu_ms / 1e3 * 0.9);
  EXPECT_LT(*usage.cpu_seconds - *before.cpu_seconds, *stats.cpu_ms / 1e3 + 0.5);
  EXPECT_EQ(usage.memory_bytes.has_value(),
            PathExists(FindCgroup2Mount() + "/kiln-test-v2mech/memory.current"));
  EXPECT_TRUE((*cg)->Destroy().ok());
  EXPECT_FALSE(PathExists(dir));
  EXPECT_GE((*manager)->Usage().cpu_seconds.value_or(0), *usage.cpu_seconds);
}

// The pool (cgroup_pool.hpp), on each driver this host has: a cgroup given
// back is handed to the next sandbox that is never frozen, with its CPU
// counted from zero; one with a process still in it is not handed out; the
// idle ones go with the manager. v2 without controllers counts CPU only.
class CgroupPoolTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string prefix = "kiln-test-pool-" + GetParam();
    auto m = GetParam() == "v1"
                 ? CreateCgroupV1({.mode = "v1", .prefix = prefix})
                 : CreateCgroupV2({.mode = "v2", .prefix = prefix, .require_controllers = false});
    if (!m.ok()) GTEST_SKIP() << GetParam() << " is not usable here: " << m.status().ToString();
    manager_ = std::move(*m);
    // The hierarchy every process joins (v1: pids; v2: the one).
    for (const MountInfo& mi : ReadMountInfo()) {
      if (GetParam() == "v1" && mi.fs_type == "cgroup" &&
          ("," + mi.super_options + ",").find(",pids,") != std::string::npos) {
        dir_ = mi.mount_point + "/" + prefix;
      }
    }
    if (GetParam() == "v2") dir_ = FindCgroup2Mount() + "/" + prefix;
  }
  std::vector<std::string> Cgroups() const { return ListSubdirs(dir_); }
  // A child that joins `cg` and spins until killed.
  pid_t Spinner(SandboxCgroup& cg) {
    std::vector<int> fds;
    for (const UniqueFd& fd : cg.join_fds()) fds.push_back(fd.get());
    pid_t child = ::fork();
    if (child == 0) {
      for (int fd : fds) {
        if (::write(fd, "0", 1) != 1) _exit(3);
      }
      volatile long sink = 0;
      for (long i = 0;; ++i) sink = sink + i;
    }
    return child;
  }

  std::unique_ptr<CgroupManager> manager_;
  std::string dir_;
};

TEST_P(CgroupPoolTest, AGivenBackCgroupServesTheNextSandboxFromZero) {
  auto first = manager_->CreateFor("1-1", SandboxLimits{}, false);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_EQ(Cgroups().size(), 1u);
  const std::string name = Cgroups()[0];
  EXPECT_EQ(name.rfind(std::to_string(::getpid()) + "-cg", 0), 0u) << name;
  pid_t child = Spinner(**first);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_GT((*first)->Stats().cpu_ms.value_or(0), 50) << "not spinning in the cgroup";
  // Only what is asked for is read.
  const CgroupStats cpu_only = (*first)->Stats(stats::kCpu);
  EXPECT_GT(cpu_only.cpu_ms.value_or(0), 50);
  EXPECT_FALSE(cpu_only.peak_bytes.has_value());
  EXPECT_FALSE(cpu_only.current_bytes.has_value());
  const CgroupStats memory_only = (*first)->Stats(stats::kCurrent);
  EXPECT_FALSE(memory_only.cpu_ms.has_value());
  EXPECT_FALSE(memory_only.peak_bytes.has_value());
  if (GetParam() == "v1") {
    EXPECT_TRUE(memory_only.current_bytes.has_value());
  }
  (*first)->KillAll();
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  EXPECT_TRUE((*first)->Destroy().ok());
  EXPECT_EQ(Cgroups(), std::vector<std::string>{name}) << "kept, idle";

  auto second = manager_->CreateFor("1-2", SandboxLimits{}, false);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(Cgroups(), std::vector<std::string>{name}) << "the same cgroup, reused";
  const CgroupStats fresh = (*second)->Stats();
  EXPECT_LT(fresh.cpu_ms.value_or(0), 5) << "the last sandbox's CPU carried over";
  EXPECT_FALSE(fresh.oom_killed);
  if (GetParam() == "v1") {
    ASSERT_TRUE(fresh.peak_bytes.has_value());
    EXPECT_LT(*fresh.peak_bytes, 1u << 20);
  }
  // A process still in it: the next sandbox gets another cgroup.
  child = Spinner(**second);
  bool joined = false;
  for (int i = 0; i < 200 && !joined; ++i) {
    joined = (*second)->Stats().cpu_ms.value_or(0) > 1;
    if (!joined) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(joined);
  EXPECT_TRUE((*second)->Destroy().ok());  // given back, not yet empty
  auto third = manager_->CreateFor("1-3", SandboxLimits{}, false);
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  EXPECT_EQ(Cgroups().size(), 2u) << "a cgroup with a process in it was handed out";
  // A session's (freezable) cgroup is its own, named for it.
  auto session = manager_->CreateFor("1-4", SandboxLimits{}, true);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  EXPECT_EQ(Cgroups().size(), 3u);
  EXPECT_TRUE(PathExists(dir_ + "/1-4"));
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  session->reset();
  EXPECT_FALSE(PathExists(dir_ + "/1-4"));
  third->reset();
  manager_.reset();
  EXPECT_FALSE(PathExists(dir_)) << "idle cgroups must go with the manager";
}

INSTANTIATE_TEST_SUITE_P(Drivers, CgroupPoolTest, ::testing::Values("v1", "v2"),
                         [](const auto& info) { return info.param; });

// v1: an empty cgroup stays frozen as long as the manager lives, so that
// sessions freezing and thawing after every execution never switch the
// kernel's freezer on and off (cgroup_v1.cpp, KeepFreezerActive); it goes
// with the manager.
TEST(CgroupV1, AnEmptyFrozenKeeperLivesAsLongAsTheManager) {
  std::string freezer;
  for (const MountInfo& m : ReadMountInfo()) {
    if (m.fs_type == "cgroup" &&
        ("," + m.super_options + ",").find(",freezer,") != std::string::npos)
      freezer = m.mount_point;
  }
  if (freezer.empty()) GTEST_SKIP() << "no cgroup v1 freezer hierarchy on this host";
  const std::string keeper =
      freezer + "/kiln-test-v1keeper/" + std::to_string(::getpid()) + "-freezer-keeper";
  {
    auto manager = CreateCgroupV1(CgroupOptions{.mode = "v1", .prefix = "kiln-test-v1keeper"});
    ASSERT_TRUE(manager.ok()) << manager.status().ToString();
    auto state = ReadFileString(keeper + "/freezer.state");
    ASSERT_TRUE(state.ok()) << state.status().ToString();
    EXPECT_EQ(*state, "FROZEN\n");
    EXPECT_EQ(ReadFileString(keeper + "/cgroup.procs").value_or("?"), "");
    // A sandbox of the same prefix freezes and thaws as before.
    auto cg = (*manager)->CreateFor("1-1", SandboxLimits{}, true);
    ASSERT_TRUE(cg.ok()) << cg.status().ToString();
    EXPECT_TRUE((*cg)->Freeze(true).ok());
    EXPECT_TRUE((*cg)->Freeze(false).ok());
    EXPECT_TRUE((*cg)->Destroy().ok());
  }
  EXPECT_FALSE(PathExists(keeper));
  EXPECT_FALSE(PathExists(freezer + "/kiln-test-v1keeper"));
}

// The v2 freezer on this host's hierarchy (cgroup.freeze needs no
// controller): a frozen spinner uses no CPU, and SIGKILL still ends it while
// frozen (unlike v1's freezer: see CgroupV1::Freeze), so a v2 session left
// frozen by a dead worker dies of its parent-death signal.
TEST(CgroupV2, FreezeStopsAndAFrozenTaskStillDiesOfSigkill) {
  if (FindCgroup2Mount().empty()) GTEST_SKIP() << "no cgroup2 mount on this host";
  auto manager = CreateCgroupV2(
      CgroupOptions{.mode = "v2", .prefix = "kiln-test-v2freeze", .require_controllers = false});
  ASSERT_TRUE(manager.ok()) << manager.status().ToString();
  auto cg = (*manager)->CreateFor("1-1", SandboxLimits{}, true);
  ASSERT_TRUE(cg.ok()) << cg.status().ToString();
  int join = (*cg)->join_fds().at(0).get();
  pid_t child = ::fork();
  if (child == 0) {
    if (::write(join, "0", 1) != 1) _exit(3);
    volatile long sink = 0;
    for (long i = 0;; ++i) sink = sink + i;
  }
  auto cpu_over = [&](std::chrono::milliseconds window) {
    double before = (*cg)->Stats().cpu_ms.value_or(0);
    std::this_thread::sleep_for(window);
    return (*cg)->Stats().cpu_ms.value_or(0) - before;
  };
  EXPECT_GT(cpu_over(std::chrono::milliseconds(300)), 50) << "not spinning in the cgroup";
  ASSERT_TRUE((*cg)->Freeze(true).ok());
  EXPECT_LT(cpu_over(std::chrono::milliseconds(300)), 5) << "ran while frozen";
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  bool reaped = false;
  for (int i = 0; i < 500 && !reaped; ++i) {
    reaped = ::waitpid(child, &status, WNOHANG) == child;
    if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!reaped) {  // do not leave it behind
    (void)(*cg)->Freeze(false);
    ::waitpid(child, &status, 0);
  }
  EXPECT_TRUE(reaped) << "a v2-frozen task did not die of SIGKILL";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_TRUE((*cg)->Destroy().ok());
}

}  // namespace
}  // namespace kiln::worker::sandbox
