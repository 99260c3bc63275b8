// ExecutionMachine without a sandbox: the transitions of one-shot jobs and
// session executions on a hand-driven clock (frame and EOFs, exit before the
// frame, drain grace, timeout, cpu budget, cancel, flood, network cap,
// interrupt grace), and which stop reason wins when two come together.
#include "worker/executor/execution_machine.hpp"

#include <gtest/gtest.h>

namespace kiln::worker {
namespace {

using namespace std::chrono_literals;
using TimePoint = ExecutionMachine::TimePoint;

const TimePoint kT0 = TimePoint{} + 1h;
constexpr auto kTimeout = 1000ms;
constexpr double kCpuBudgetMs = 300;

// A machine with its clock at kT0 and a cpu reading the test sets.
class Harness {
 public:
  explicit Harness(ExecPolicy policy) : m(policy, kT0, kTimeout, kCpuBudgetMs) {}

  StopAction Tick(std::chrono::milliseconds at, bool flooded = false) {
    return m.Tick(kT0 + at, flooded, cpu_fn);
  }
  void AllEof() {
    m.OnEof(Pipe::kStdout);
    m.OnEof(Pipe::kStderr);
    m.OnEof(Pipe::kControl);
  }

  ExecutionMachine m;
  double cpu_ms = 0;
  int cpu_reads = 0;
  std::function<double()> cpu_fn = [this] {
    ++cpu_reads;
    return cpu_ms;
  };
};

// ---- One-shot jobs

TEST(OneShotMachine, FrameThenEofsCompletesBeforeTheExit) {
  Harness h(OneShotPolicy());
  EXPECT_EQ(h.Tick(0ms), StopAction::kNone);
  h.m.OnFrame();
  h.m.OnEof(Pipe::kStdout);
  h.m.OnEof(Pipe::kStderr);
  EXPECT_EQ(h.Tick(1ms), StopAction::kNone);
  EXPECT_EQ(h.m.state(), ExecState::kRunning);  // control still open
  h.m.OnEof(Pipe::kControl);
  EXPECT_EQ(h.Tick(2ms), StopAction::kNone);
  EXPECT_EQ(h.m.state(), ExecState::kDone);
  EXPECT_TRUE(h.m.early());
  EXPECT_FALSE(h.m.exited());
  EXPECT_EQ(h.m.stop(), StopReason::kNone);
}

TEST(OneShotMachine, EofsWithoutFrameWaitForTheExit) {
  Harness h(OneShotPolicy());
  h.AllEof();
  h.Tick(1ms);
  EXPECT_EQ(h.m.state(), ExecState::kRunning);
  h.m.OnExit(kT0 + 2ms);
  EXPECT_EQ(h.m.state(), ExecState::kDraining);
  h.Tick(3ms);
  EXPECT_EQ(h.m.state(), ExecState::kDone);
  EXPECT_FALSE(h.m.early());
  EXPECT_TRUE(h.m.exited());
}

TEST(OneShotMachine, ExitBeforeTheFrameDrainsUntilEof) {
  Harness h(OneShotPolicy());
  h.m.OnExit(kT0 + 10ms);
  EXPECT_EQ(h.m.state(), ExecState::kDraining);
  EXPECT_EQ(h.m.WakeBy(kT0 + 10ms), kT0 + 510ms);  // the drain grace, not the deadline
  h.Tick(20ms);
  EXPECT_EQ(h.m.state(), ExecState::kDraining);
  h.m.OnFrame();  // a frame now changes nothing: pid 1's exit status counts
  h.AllEof();
  h.Tick(30ms);
  EXPECT_EQ(h.m.state(), ExecState::kDone);
  EXPECT_FALSE(h.m.early());
}

TEST(OneShotMachine, DrainGraceExpiresWithPipesOpen) {
  Harness h(OneShotPolicy());
  h.m.OnExit(kT0 + 10ms);
  h.m.OnEof(Pipe::kControl);
  h.Tick(509ms);
  EXPECT_EQ(h.m.state(), ExecState::kDraining);
  h.Tick(510ms);
  EXPECT_EQ(h.m.state(), ExecState::kDone);
  EXPECT_TRUE(h.m.open(Pipe::kStdout));
  EXPECT_EQ(h.m.stop(), StopReason::kNone);
}

TEST(OneShotMachine, TimeoutKillsAndWaitsForTheExit) {
  Harness h(OneShotPolicy());
  EXPECT_EQ(h.m.WakeBy(kT0), kT0 + kCpuCheck);  // the first cpu check
  EXPECT_EQ(h.Tick(999ms), StopAction::kNone);
  EXPECT_EQ(h.Tick(1000ms), StopAction::kKill);
  EXPECT_EQ(h.m.state(), ExecState::kStopping);
  EXPECT_EQ(h.m.stop(), StopReason::kTimeout);
  EXPECT_TRUE(h.m.killed());
  EXPECT_EQ(h.m.WakeBy(kT0 + 1000ms), kT0 + 1100ms);
  // A frame and EOFs after the kill do not complete it: the exit does.
  h.m.OnFrame();
  h.AllEof();
  EXPECT_EQ(h.Tick(1001ms), StopAction::kNone);
  EXPECT_EQ(h.m.state(), ExecState::kStopping);
  h.m.OnExit(kT0 + 1002ms);
  h.Tick(1003ms);
  EXPECT_EQ(h.m.state(), ExecState::kDone);
  EXPECT_EQ(h.m.stop(), StopReason::kTimeout);
  EXPECT_FALSE(h.m.early());
}

TEST(OneShotMachine, CompletionBeatsTheDeadlineInTheSameTurn) {
  Harness h(OneShotPolicy());
  h.m.OnFrame();
  h.AllEof();
  EXPECT_EQ(h.Tick(1500ms), StopAction::kNone);
  EXPECT_EQ(h.m.state(), ExecState::kDone);
  EXPECT_TRUE(h.m.early());
}

TEST(OneShotMachine, CpuIsReadEveryCheckAndItsBudgetStopsTheJob) {
  Harness h(OneShotPolicy());
  h.Tick(10ms);
  EXPECT_EQ(h.cpu_reads, 0);
  h.cpu_ms = 100;
  EXPECT_EQ(h.Tick(50ms), StopAction::kNone);
  EXPECT_EQ(h.cpu_reads, 1);
  h.cpu_ms = 301;
  EXPECT_EQ(h.Tick(60ms), StopAction::kNone);  // next check at 100 ms
  EXPECT_EQ(h.cpu_reads, 1);
  // Over budget in the turn the job completes: the budget wins.
  h.m.OnFrame();
  h.AllEof();
  EXPECT_EQ(h.Tick(100ms), StopAction::kKill);
  EXPECT_EQ(h.m.stop(), StopReason::kTimeout);
  EXPECT_EQ(h.m.state(), ExecState::kStopping);
  EXPECT_FALSE(h.m.early());
}

TEST(OneShotMachine, CancelKillsAndBeatsAnEarlierStop) {
  Harness h(OneShotPolicy());
  EXPECT_TRUE(h.m.wants_cancel());
  EXPECT_EQ(h.m.OnCancel(kT0 + 5ms), StopAction::kKill);
  EXPECT_EQ(h.m.stop(), StopReason::kCancel);
  EXPECT_FALSE(h.m.wants_cancel());

  Harness t(OneShotPolicy());
  t.Tick(1000ms);
  EXPECT_EQ(t.m.stop(), StopReason::kTimeout);
  EXPECT_TRUE(t.m.wants_cancel());
  EXPECT_EQ(t.m.OnCancel(kT0 + 1001ms), StopAction::kKill);
  EXPECT_EQ(t.m.stop(), StopReason::kCancel);

  // After the exit too, while the pipes drain.
  Harness d(OneShotPolicy());
  d.m.OnExit(kT0 + 5ms);
  EXPECT_EQ(d.m.OnCancel(kT0 + 6ms), StopAction::kKill);
  EXPECT_EQ(d.m.stop(), StopReason::kCancel);
  EXPECT_EQ(d.m.state(), ExecState::kDraining);
}

TEST(OneShotMachine, FloodKillsUnlessAlreadyStoppedOrExited) {
  Harness h(OneShotPolicy());
  EXPECT_EQ(h.Tick(5ms, /*flooded=*/true), StopAction::kKill);
  EXPECT_EQ(h.m.stop(), StopReason::kFlood);
  EXPECT_EQ(h.Tick(6ms, true), StopAction::kNone);
  EXPECT_EQ(h.m.OnCancel(kT0 + 7ms), StopAction::kKill);  // a cancel still wins
  EXPECT_EQ(h.m.stop(), StopReason::kCancel);

  Harness t(OneShotPolicy());
  t.Tick(1000ms);
  EXPECT_EQ(t.Tick(1001ms, true), StopAction::kNone);
  EXPECT_EQ(t.m.stop(), StopReason::kTimeout);

  Harness d(OneShotPolicy());
  d.m.OnExit(kT0 + 5ms);
  EXPECT_EQ(d.Tick(6ms, true), StopAction::kNone);
  EXPECT_EQ(d.m.stop(), StopReason::kNone);
}

TEST(OneShotMachine, ANetworkCapKillsARunningJobOnly) {
  Harness h(OneShotPolicy());
  EXPECT_EQ(h.m.OnNetworkLimit(kT0 + 5ms), StopAction::kKill);
  EXPECT_EQ(h.m.stop(), StopReason::kNetworkLimit);
  EXPECT_EQ(h.m.OnCancel(kT0 + 6ms), StopAction::kKill);  // a cancel still wins
  EXPECT_EQ(h.m.stop(), StopReason::kCancel);

  Harness t(OneShotPolicy());
  t.Tick(1000ms);
  EXPECT_EQ(t.m.OnNetworkLimit(kT0 + 1001ms), StopAction::kNone);
  EXPECT_EQ(t.m.stop(), StopReason::kTimeout);

  Harness d(OneShotPolicy());
  d.m.OnExit(kT0 + 5ms);
  EXPECT_EQ(d.m.OnNetworkLimit(kT0 + 6ms), StopAction::kNone);
  EXPECT_EQ(d.m.stop(), StopReason::kNone);
}

// ---- Session executions

TEST(SessionMachine, ANetworkCapInterruptsFirst) {
  Harness h(SessionPolicy(200ms));
  EXPECT_EQ(h.m.OnNetworkLimit(kT0 + 5ms), StopAction::kInterrupt);
  EXPECT_EQ(h.m.stop(), StopReason::kNetworkLimit);
  EXPECT_EQ(h.Tick(205ms), StopAction::kKill);
}

TEST(SessionMachine, FrameEndsTheExecutionAtOnce) {
  Harness h(SessionPolicy(2000ms));
  h.Tick(0ms);
  h.m.OnFrame();  // stdout and stderr stay open: the driver keeps them
  EXPECT_EQ(h.m.state(), ExecState::kDraining);
  h.Tick(1ms);
  EXPECT_EQ(h.m.state(), ExecState::kDone);
  EXPECT_FALSE(h.m.killed());
  EXPECT_FALSE(h.m.exited());
}

TEST(SessionMachine, ExitEndsTheExecutionAtOnce) {
  Harness h(SessionPolicy(2000ms));
  h.m.OnExit(kT0 + 3ms);
  h.Tick(4ms);
  EXPECT_EQ(h.m.state(), ExecState::kDone);
  EXPECT_TRUE(h.m.exited());
}

TEST(SessionMachine, TimeoutInterruptsAndAFrameSavesTheSession) {
  Harness h(SessionPolicy(2000ms));
  EXPECT_EQ(h.Tick(1000ms), StopAction::kInterrupt);
  EXPECT_EQ(h.m.stop(), StopReason::kTimeout);
  EXPECT_FALSE(h.m.killed());
  EXPECT_FALSE(h.m.wants_cancel());
  EXPECT_EQ(h.m.WakeBy(kT0 + 1000ms), kT0 + 1020ms);
  h.m.OnFrame();
  h.Tick(1010ms);
  EXPECT_EQ(h.m.state(), ExecState::kDone);
  EXPECT_EQ(h.m.stop(), StopReason::kTimeout);
  EXPECT_FALSE(h.m.killed());
}

TEST(SessionMachine, NoFrameWithinTheInterruptGraceKills) {
  Harness h(SessionPolicy(2000ms));
  EXPECT_EQ(h.m.OnCancel(kT0 + 100ms), StopAction::kInterrupt);
  EXPECT_EQ(h.m.stop(), StopReason::kCancel);
  EXPECT_EQ(h.m.OnCancel(kT0 + 101ms), StopAction::kNone);
  EXPECT_EQ(h.Tick(2099ms), StopAction::kNone);
  EXPECT_EQ(h.Tick(2100ms), StopAction::kKill);
  EXPECT_TRUE(h.m.killed());
  EXPECT_EQ(h.Tick(2120ms), StopAction::kNone);  // killed once
  h.m.OnExit(kT0 + 2130ms);
  h.Tick(2131ms);
  EXPECT_EQ(h.m.state(), ExecState::kDone);
  EXPECT_EQ(h.m.stop(), StopReason::kCancel);
}

TEST(SessionMachine, CpuCountsAgainstTheBudget) {
  Harness h(SessionPolicy(2000ms));
  h.cpu_ms = 301;
  EXPECT_EQ(h.Tick(50ms), StopAction::kInterrupt);
  EXPECT_EQ(h.m.stop(), StopReason::kTimeout);
}

TEST(SessionMachine, FloodKillsEvenAfterAnInterruptButNotAfterTheKill) {
  Harness h(SessionPolicy(2000ms));
  h.Tick(1000ms);
  EXPECT_EQ(h.Tick(1001ms, true), StopAction::kKill);
  EXPECT_EQ(h.m.stop(), StopReason::kFlood);

  Harness k(SessionPolicy(2000ms));
  k.Tick(1000ms);
  EXPECT_EQ(k.Tick(3000ms, true), StopAction::kKill);  // the grace ran out first
  EXPECT_EQ(k.m.stop(), StopReason::kTimeout);
  EXPECT_EQ(k.Tick(3001ms, true), StopAction::kNone);
}

TEST(SessionMachine, CancelInTheFramesTurnStillCounts) {
  Harness h(SessionPolicy(2000ms));
  h.m.OnFrame();
  EXPECT_TRUE(h.m.wants_cancel());
  EXPECT_EQ(h.m.OnCancel(kT0 + 1ms), StopAction::kInterrupt);
  EXPECT_EQ(h.m.stop(), StopReason::kCancel);
  h.Tick(2ms);
  EXPECT_EQ(h.m.state(), ExecState::kDone);
  EXPECT_FALSE(h.m.killed());
}

}  // namespace
}  // namespace kiln::worker
