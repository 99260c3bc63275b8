#include "worker/executor/execution_machine.hpp"

#include <algorithm>

namespace kiln::worker {

ExecPolicy OneShotPolicy() {
  ExecPolicy p;
  p.stopping_tick = std::chrono::milliseconds(100);
  // After pid 1 exits, give the pipes this long to reach end-of-file.
  p.drain_grace = std::chrono::milliseconds(500);
  p.cancel_overrides = true;
  return p;
}

ExecPolicy SessionPolicy(std::chrono::milliseconds interrupt_grace) {
  ExecPolicy p;
  p.interrupt_grace = interrupt_grace;
  p.stopping_tick = std::chrono::milliseconds(20);
  p.frame_ends = true;  // the driver's pipes stay open for the next execution
  return p;
}

ExecutionMachine::ExecutionMachine(ExecPolicy policy, TimePoint start,
                                   std::chrono::milliseconds timeout, double cpu_budget_ms)
    : policy_(policy),
      deadline_(start + timeout),
      cpu_budget_ms_(cpu_budget_ms),
      next_cpu_check_(start + kCpuCheck) {}

StopAction ExecutionMachine::Tick(TimePoint now, bool flooded,
                                  const std::function<double()>& cpu_ms) {
  if (state_ == ExecState::kDone) return StopAction::kNone;
  if (state_ == ExecState::kDraining) {
    // A session takes what its pipes hold now (its driver keeps them open).
    if (!policy_.drain_grace || AllEof() || now >= *drain_until_) state_ = ExecState::kDone;
    return StopAction::kNone;
  }
  StopAction action = StopAction::kNone;
  if (kill_at_ && now >= *kill_at_ && !killed_) action = Kill();
  // A flood is stopped by a kill: it may not have an interrupt's grace. Once
  // killed, the reason the sandbox was killed for stays.
  if (flooded && !killed_) {
    stop_ = StopReason::kFlood;
    state_ = ExecState::kStopping;
    action = Kill();
  }
  // RLIMIT_CPU is per process (each child starts afresh, pid 1 ignores
  // SIGXCPU, a session's driver lives across executions): cpu_ms is enforced
  // on the whole sandbox from its cgroup, every kCpuCheck.
  if (state_ == ExecState::kRunning && now >= next_cpu_check_) {
    next_cpu_check_ = now + kCpuCheck;
    if (cpu_ms() > cpu_budget_ms_) action = Stop(StopReason::kTimeout, now);
  }
  // One-shot: complete once the wrapper wrote its frame and no process of
  // the job holds stdout or stderr any more. The interpreter's shutdown and
  // the namespace teardown then stay off the job's latency. Checked before
  // the deadline: a job that is done is not timed out.
  if (state_ == ExecState::kRunning && frame_ && AllEof()) {
    early_ = true;
    state_ = ExecState::kDone;
    return action;
  }
  if (state_ == ExecState::kRunning && now >= deadline_) action = Stop(StopReason::kTimeout, now);
  return action;
}

StopAction ExecutionMachine::OnCancel(TimePoint now) {
  if (!wants_cancel()) return StopAction::kNone;
  return Stop(StopReason::kCancel, now);
}

StopAction ExecutionMachine::OnNetworkLimit(TimePoint now) {
  if (state_ != ExecState::kRunning) return StopAction::kNone;
  return Stop(StopReason::kNetworkLimit, now);
}

void ExecutionMachine::OnExit(TimePoint now) {
  exited_ = true;
  if (state_ != ExecState::kRunning && state_ != ExecState::kStopping) return;
  state_ = ExecState::kDraining;
  if (policy_.drain_grace) drain_until_ = now + *policy_.drain_grace;
}

void ExecutionMachine::OnFrame() {
  frame_ = true;
  if (policy_.frame_ends && (state_ == ExecState::kRunning || state_ == ExecState::kStopping)) {
    state_ = ExecState::kDraining;
  }
}

bool ExecutionMachine::wants_cancel() const {
  if (state_ == ExecState::kDone || stop_ == StopReason::kCancel) return false;
  return stop_ == StopReason::kNone || policy_.cancel_overrides;
}

ExecutionMachine::TimePoint ExecutionMachine::WakeBy(TimePoint now) const {
  if (stop_ != StopReason::kNone) return now + policy_.stopping_tick;
  if (state_ == ExecState::kDraining) return drain_until_.value_or(now);
  return std::min(deadline_, next_cpu_check_);
}

// Also called while draining (a cancel after the exit, or a session's frame
// in the same turn): the reason changes, the state does not.
StopAction ExecutionMachine::Stop(StopReason why, TimePoint now) {
  stop_ = why;
  if (state_ == ExecState::kRunning) state_ = ExecState::kStopping;
  if (!policy_.interrupt_grace) return Kill();
  kill_at_ = now + *policy_.interrupt_grace;
  return StopAction::kInterrupt;
}

StopAction ExecutionMachine::Kill() {
  killed_ = true;
  return StopAction::kKill;
}

}  // namespace kiln::worker
