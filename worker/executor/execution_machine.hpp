// ExecutionMachine: decides, without any I/O, when a running execution (a
// one-shot job or a session execution) is stopped, drained and done. The
// ExecutionDriver tells it what it saw and does what it answers (Interrupt,
// Kill); unit tests drive it by hand.
//
//   Running  --timeout, cpu over, cancel, flood-->    Stopping(reason)
//   Running  --frame, every pipe at EOF (one-shot)--> Done (early: pid 1 not waited for)
//   Running | Stopping --frame (session)-->           Draining
//   Running | Stopping --exit-->                      Draining
//   Stopping --interrupt grace over (session)-->      Stopping, killed
//   Draining --every pipe at EOF, or grace over-->    Done
//
// Events come from the driver's poll (OnEof, OnFrame, OnExit, OnCancel) and
// from the clock (Tick, once at the top of every turn); the order of Tick's
// checks is the runners' as they were (execution_machine.cpp). One thread.
#pragma once

#include <array>
#include <chrono>
#include <functional>
#include <optional>

#include "common/clock.hpp"

namespace kiln::worker {

enum class ExecState { kRunning, kStopping, kDraining, kDone };
// Why an execution was stopped before it ended by itself.
enum class StopReason { kNone, kTimeout, kCancel, kFlood, kNetworkLimit };
// What the driver is to do to the sandbox.
enum class StopAction { kNone, kInterrupt, kKill };
enum class Pipe { kStdout, kStderr, kControl };

// How a running job's cpu time is compared with its budget.
inline constexpr auto kCpuCheck = std::chrono::milliseconds(50);

// What differs between a one-shot job and a session execution.
struct ExecPolicy {
  // Unset (one-shot): a stop kills the sandbox at once. Set (sessions): it
  // interrupts the running code and kills the sandbox only if no frame came
  // within this long, so the session can survive.
  std::optional<std::chrono::milliseconds> interrupt_grace;
  // A stopping execution is looked at this often.
  std::chrono::milliseconds stopping_tick{100};
  // Sessions: the frame ends the execution (the driver's pipes stay open).
  // One-shot: it ends the job early once every pipe is at EOF.
  bool frame_ends = false;
  // One-shot: after pid 1 exits, the pipes get this long to reach EOF. Unset
  // (sessions): the execution ends at the exit, with what the pipes hold.
  std::optional<std::chrono::milliseconds> drain_grace;
  // One-shot: a cancel still counts after a timeout, a flood or the exit.
  bool cancel_overrides = false;
};

// One-shot jobs: a stop kills at once; the frame ends the job early once
// every pipe is at EOF; after pid 1 exits the pipes get 500 ms to reach EOF;
// a cancel beats an earlier stop.
ExecPolicy OneShotPolicy();
// Session executions: a stop interrupts, and kills after `interrupt_grace`
// without a frame; the frame or the driver's exit ends the execution.
ExecPolicy SessionPolicy(std::chrono::milliseconds interrupt_grace);

class ExecutionMachine {
 public:
  using TimePoint = common::SteadyClock::time_point;

  // `start`: what the timeout and cpu checks count from; cpu_budget_ms is
  // compared with what Tick's `cpu_ms` reads.
  ExecutionMachine(ExecPolicy policy, TimePoint start, std::chrono::milliseconds timeout,
                   double cpu_budget_ms);

  // Time-driven checks, at the top of every turn: interrupt grace, output
  // flood (`flooded`), cpu time (reads cpu_ms() every kCpuCheck while
  // running), early completion, drain grace, deadline.
  StopAction Tick(TimePoint now, bool flooded, const std::function<double()>& cpu_ms);
  StopAction OnCancel(TimePoint now);
  // The execution broke a network cap (its egress lease said so): stopped
  // like a timeout (a session gets the interrupt's grace).
  StopAction OnNetworkLimit(TimePoint now);
  // pid 1 exited (or a session's driver closed its control pipe).
  void OnExit(TimePoint now);
  // A control frame arrived (one-shot: control bytes, valid or not).
  void OnFrame();
  void OnEof(Pipe pipe) { open_[static_cast<size_t>(pipe)] = false; }

  ExecState state() const { return state_; }
  StopReason stop() const { return stop_; }
  bool open(Pipe pipe) const { return open_[static_cast<size_t>(pipe)]; }
  bool exited() const { return exited_; }
  bool killed() const { return killed_; }
  // Done on a frame and EOFs, before pid 1 exited.
  bool early() const { return early_; }
  // Whether the cancel fd is still to be watched.
  bool wants_cancel() const;
  // When the next Tick has something to decide; the driver polls no longer.
  TimePoint WakeBy(TimePoint now) const;

 private:
  StopAction Stop(StopReason why, TimePoint now);
  StopAction Kill();
  bool AllEof() const { return !open_[0] && !open_[1] && !open_[2]; }

  const ExecPolicy policy_;
  const TimePoint deadline_;
  const double cpu_budget_ms_;
  ExecState state_ = ExecState::kRunning;
  StopReason stop_ = StopReason::kNone;
  std::array<bool, 3> open_{true, true, true};
  bool exited_ = false;
  bool frame_ = false;
  bool killed_ = false;
  bool early_ = false;
  TimePoint next_cpu_check_;
  std::optional<TimePoint> kill_at_;      // after an interrupt
  std::optional<TimePoint> drain_until_;  // after the exit
};

}  // namespace kiln::worker
