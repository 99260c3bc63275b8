// ExecutionDriver: runs one execution in a sandbox, for RunJob (one-shot)
// and RunSessionExecution (a session's sandbox); they build the Result from
// what it saw.
//
//   ExecutionDriver driver(job, sandbox, options, spec);   // the execution's clock starts
//   RETURN_IF_ERROR(driver.Run(std::move(frame), cancel_fd));
//   driver.machine().stop(); driver.control(); driver.result().stdout_data; ...
//
// Run applies the job's limits and files, hands the sandbox the frame, pumps
// stdout/stderr through the job's OutputPump, reads the control pipe, relays
// the code's tool calls (ToolChannel, when options carry a mailbox), and
// lets an ExecutionMachine decide when to interrupt, kill, drain and end
// (execution_machine.hpp); the DriverSpec says what differs between one-shot
// jobs and sessions. Blocks the calling job thread for the execution's
// duration; never call it from the event loop.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/clock.hpp"
#include "common/protocol/messages.hpp"
#include "common/secrets/secrets_filter.hpp"
#include "common/status.hpp"
#include "worker/executor/execution_machine.hpp"
#include "worker/executor/job_runner.hpp"
#include "worker/executor/output_pump.hpp"
#include "worker/executor/tool_channel.hpp"
#include "worker/executor/warm_pool.hpp"
#include "worker/runtimes/runtime.hpp"

namespace kiln::worker {

struct DriverSpec {
  ExecPolicy machine;
  // Unset: the sandbox's per-process cpu rlimit is the job's cpu budget.
  std::optional<uint64_t> cpu_rlimit_ms;
  // One-shot: the timeout starts once the limits and files are in place.
  // Sessions: it starts with the execution (its thaw included).
  bool clock_after_setup = false;
  // Sessions: cpu time counts from this execution's start, not the sandbox's.
  bool cpu_from_start = false;
  // With cpu_from_start: the sandbox's CPU (SandboxProcess::CpuMs) to count
  // from instead of its value at the start: a session left running since its
  // last execution counts from that one's end (SessionSandbox::awake).
  std::optional<double> cpu_start_ms;
  // One-shot: stdin is closed once the frame is written (EOF starts the job).
  bool close_stdin = false;
  // Sessions: the driver's frames are read from the control pipe through
  // this stream, and the first one ends the execution. Null (one-shot): the
  // control bytes are kept until EOF, for Runtime::ParseControl.
  runtimes::ControlStream* frames = nullptr;
  // Sessions: resumes the stopped sandbox, once the limits, files and the
  // CPU baseline are in place and as much of the frame as the pipe takes is
  // written, so the program finds its frame when it runs again rather than
  // being woken for it a second time. An error loses the sandbox.
  std::function<common::Status()> resume;
};

class ExecutionDriver {
 public:
  // The execution's duration counts from here. All references outlive the driver.
  ExecutionDriver(const common::protocol::Execute& job, WarmSandbox& sandbox,
                  const RunOptions& options, DriverSpec spec);
  ExecutionDriver(const ExecutionDriver&) = delete;
  ExecutionDriver& operator=(const ExecutionDriver&) = delete;

  // Runs the execution to its end; the output is drained and flushed then.
  // An error means it could not run; sandbox_lost() says whether the sandbox
  // is unusable (its limits could not be set, or poll failed and it was
  // killed).
  common::Status Run(std::string frame, int cancel_fd);
  bool sandbox_lost() const { return sandbox_lost_; }

  // After a successful Run: job_id, stdout, stderr, duration_ms, truncated
  // and the output's redactions are set; the runner completes it.
  common::protocol::Result& result() { return result_; }
  const ExecutionMachine& machine() const { return *machine_; }
  const std::string& control() const { return control_; }  // one-shot
  // A session's frame (valid or not), if one came.
  std::optional<common::StatusOr<runtimes::Runtime::Outcome>>& frame() { return frame_; }
  const common::SecretsPolicy& policy() const { return *policy_; }
  double cpu_budget_ms() const { return cpu_budget_ms_; }
  double cpu_start_ms() const { return cpu_start_ms_; }
  double setup_ms() const { return setup_ms_; }
  double exit_seen_ms() const { return exit_seen_ms_; }

 private:
  common::Status Setup();
  void WriteFrame();
  void OnControl(int fd);
  void Drain();

  const common::protocol::Execute& job_;
  WarmSandbox& sb_;
  const RunOptions& options_;
  const DriverSpec spec_;
  const common::SteadyClock::time_point start_;

  std::string frame_bytes_;
  size_t frame_off_ = 0;
  double cpu_budget_ms_ = 0;
  double cpu_start_ms_ = 0;
  double setup_ms_ = 0;
  common::SteadyClock::time_point poll_until_{};  // busy polling ends (RunOptions)
  double exit_seen_ms_ = 0;
  bool sandbox_lost_ = false;
  bool network_limit_seen_ = false;
  std::shared_ptr<const common::SecretsPolicy> policy_;
  std::optional<OutputPump> pump_;
  std::optional<ToolChannel> tools_;
  bool tools_open_ = false;  // the sandbox's end is still readable
  std::optional<ExecutionMachine> machine_;
  std::string control_;
  std::optional<common::StatusOr<runtimes::Runtime::Outcome>> frame_;
  common::protocol::Result result_;
};

// Masks the job's secrets in what a frame says (its `result`, error texts and
// rich outputs leave the worker too), counting them in *redactions. Text
// outputs get the whole policy, as `result` does; binary ones (image/png)
// only the job's registered secrets, as collected files do.
void MaskOutcome(const common::protocol::Execute& job, const common::SecretsPolicy& policy,
                 runtimes::Runtime::Outcome* outcome, uint32_t* redactions);

// The Result's reason for an execution stopped early; nullopt for kNone.
std::optional<common::protocol::EndReason> StopEndReason(StopReason stop);

}  // namespace kiln::worker
