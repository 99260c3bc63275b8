// RunSessionExecution: runs one execution of a session in the session's
// long-lived sandbox and builds its Result.
//
//   SessionRun run = RunSessionExecution(execute, *lease.session, runtime, options, cancel_fd);
//   send(run.result);
//   run.destroy ? table.Release(lease.session, true) : table.Rest(lease.session);
//
// Writes the execution frame to the REPL driver (stdin stays open), pumps
// stdout/stderr through the same filter and cap as one-shot jobs, and ends
// the execution when the driver's control frame arrives (then whatever the
// execution printed before it is already in the pipes and is drained). Per
// execution: wall-clock timeout, cpu_ms (from the cgroup, counted from the
// execution's start), output cap; the session's memory and pids limits apply
// to the whole sandbox. A timeout or cancel first interrupts (SIGINT to the
// sandbox's process group: KeyboardInterrupt in Python, the running script in
// JavaScript, the foreground command in shell); if no frame comes within
// `interrupt_grace`, the sandbox is killed and `destroy` is set, as it is when
// the driver exits, runs out of memory or floods its output. Blocks the
// calling job thread.
#pragma once

#include <chrono>

#include "common/protocol/messages.hpp"
#include "worker/executor/job_runner.hpp"
#include "worker/executor/session_table.hpp"

namespace kiln::worker {

struct SessionRun {
  common::protocol::Result result;
  bool destroy = false;  // the session's sandbox is unusable: destroy it
};

SessionRun RunSessionExecution(const common::protocol::Execute& job, SessionSandbox& session,
                               const runtimes::Runtime& runtime, const RunOptions& options,
                               int cancel_fd, std::chrono::milliseconds interrupt_grace);

// Freezes the session's sandbox (every process stopped, no CPU) until the
// next RunSessionExecution thaws it. SessionTable::Rest calls it, after the
// execution's Result has left, holding the session: the freeze waits for every task to stop
// (up to ~1 ms for a sleeping interpreter, longer for node's threads). False:
// it could not be frozen and must be destroyed. A host without a freezer
// logs that once and keeps the session running (true).
bool FreezeBetweenExecutions(SessionSandbox& session);

}  // namespace kiln::worker
