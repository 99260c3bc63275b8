// Test support: child processes, free ports and shell commands for
// integration tests.
//
//   ChildProcess redis = ChildProcess::Start({"/usr/bin/redis-server", "--port", "0"},
//   "redis.log"); int port = FreePort();
//
// A ChildProcess ends its process (SIGTERM, then SIGKILL after a grace
// period) when destroyed, so a failing test never leaves processes behind.
// Only the pids a test started are ever signalled. One thread.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace kiln::testing {

class ChildProcess {
 public:
  ChildProcess() = default;
  // Starts argv[0] (an absolute path) with stdout and stderr appended to `log_file`.
  static ChildProcess Start(const std::vector<std::string>& argv, const std::string& log_file,
                            const std::vector<std::string>& extra_env = {});
  ChildProcess(ChildProcess&& o) noexcept : pid_(o.pid_) { o.pid_ = -1; }
  ChildProcess& operator=(ChildProcess&& o) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() { Stop(); }

  pid_t pid() const { return pid_; }
  bool running() const;
  void Signal(int sig) const;
  // SIGSTOP / SIGCONT: the process freezes (its own children go on) and thaws.
  void Pause() const { Signal(SIGSTOP); }
  void Resume() const { Signal(SIGCONT); }
  // SIGKILL, then waits for the exit (up to 5 s); returns the wait status.
  int Kill();
  // SIGTERM (and SIGCONT, so a paused process sees it), wait up to `grace`,
  // then SIGKILL; returns the wait status.
  int Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(5000));
  // Waits for exit without signalling; -1 on timeout.
  int Wait(std::chrono::milliseconds timeout);

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_ = -1;
};

// A TCP port on 127.0.0.1 that was free a moment ago.
int FreePort();
// Whether something accepts TCP connections on 127.0.0.1:port.
bool CanConnect(int port);
// Polls `probe` every 20 ms until it returns true or `timeout` passes.
bool WaitFor(const std::function<bool()>& probe, std::chrono::milliseconds timeout);
// A fresh directory under /tmp; removed by RemoveTree.
std::string MakeTempDir(const std::string& prefix);
void RemoveTree(const std::string& path);
std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& content);
// Pids of live processes whose real uid is in [uid_lo, uid_hi].
std::vector<pid_t> ProcessesWithUidIn(uid_t uid_lo, uid_t uid_hi);
// A "kB" field of /proc/<pid>/status (VmRSS, VmHWM, ...); -1 when absent.
long ProcStatusKb(pid_t pid, const std::string& field);
// Resets the process's peak RSS (VmHWM) to its current RSS; false when the
// kernel refuses (then VmHWM stays the peak since the process started).
bool ResetPeakRss(pid_t pid);
// Whether gVisor's runsc (/usr/bin/runsc) can start a sandbox on this host
// (`runsc do /bin/true`, checked once); when not, *why says what it printed.
// It cannot inside a chroot (no user namespaces there), e.g. fresh-debian's.
bool GvisorUsable(std::string* why);

// `s` single-quoted for /bin/sh.
std::string ShellQuote(const std::string& s);
// Runs `command` through /bin/sh: its exit status (-1 when it did not exit)
// and its output, stdout and stderr together.
std::pair<int, std::string> RunShell(const std::string& command);

}  // namespace kiln::testing
