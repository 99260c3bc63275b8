// SessionProcess: runs a Runtime's session driver for real, without a sandbox,
// the way a session sandbox would, and keeps it alive across executions: fds
// 0-3 are pipes (frames in, stdout, stderr, control out), the environment is
// exactly Launch::env, cwd is a fresh temp dir, and the driver leads its own
// process group (so Interrupt() is the worker's kill(-pgid, SIGINT)).
//
//   auto s = SessionProcess::Start(runtime);
//   Execution e = s->Execute(*runtime.EncodeExecution("x = 1", "", {}));
//   EXPECT_EQ(e.outcome->exit_code, 0);
//
// Control bytes go through a real ControlStream. Test-only; one thread. The
// destructor SIGKILLs the group, so a driver bug cannot outlive the test.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/unique_fd.hpp"
#include "worker/runtimes/runtime.hpp"

namespace kiln::worker::runtimes::testing {

// What one execution produced: the output written up to its control frame.
struct Execution {
  bool timed_out = false;  // no frame within the timeout
  bool eof = false;        // fd 3 reached EOF (the driver is gone) before a frame
  std::string stdout_data;
  std::string stderr_data;
  std::optional<common::StatusOr<Runtime::Outcome>> outcome;  // set iff a frame came
};

class SessionProcess {
 public:
  // Throws std::runtime_error when a pipe or the spawn fails.
  static std::unique_ptr<SessionProcess> Start(const Runtime& runtime);
  ~SessionProcess();
  SessionProcess(const SessionProcess&) = delete;
  SessionProcess& operator=(const SessionProcess&) = delete;

  // Queues bytes for the driver's stdin; Await writes them as the pipe allows.
  void Send(std::string_view frame);
  // Pumps stdin and reads fds 1-3 until a control frame is complete (then
  // drains what is already in the stdout/stderr pipes), fd 3 reaches EOF, or
  // `timeout` passes. Output without a frame stays counted in the next call.
  Execution Await(std::chrono::milliseconds timeout = std::chrono::seconds(20));
  Execution Execute(std::string_view frame,
                    std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    Send(frame);
    return Await(timeout);
  }

  void Interrupt();   // SIGINT to the driver's process group
  void CloseStdin();  // after the queued bytes are written by the next Await
  // Waits for the driver to exit: its exit status, 128+signal when killed, or
  // nullopt after `timeout` (the driver is then still running).
  std::optional<int> WaitExit(std::chrono::milliseconds timeout);

  pid_t pid() const { return pid_; }
  const std::string& dir() const { return dir_; }

 private:
  explicit SessionProcess(Language language) : stream_(language) {}
  // One poll round of at most `wait`; false when nothing can happen any more.
  bool Pump(std::chrono::milliseconds wait);

  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
  std::string dir_;
  common::UniqueFd in_, out_, err_, ctl_;
  std::string pending_in_;
  bool close_in_ = false;
  std::string out_data_, err_data_;
  ControlStream stream_;
};

}  // namespace kiln::worker::runtimes::testing
