// RunJob: runs one one-shot job in a warm sandbox and builds its Result.
//
//   protocol::Result r = RunJob(execute, std::move(warm), runtime, options, cancel_fd);
//
// Applies the job's limits and files, hands the wrapper its job frame, pumps
// stdout/stderr (capped at max_output_bytes, `truncated` beyond; a flood far
// past the cap is killed with reason output_limit), reads the control frame,
// enforces the wall-clock timeout, and on timeout, cancel or flood kills the
// sandbox's pid 1, which ends every process of the job. Destroying the
// sandbox (which unmounts its workspace) is left to the caller, after the
// Result has been sent. Blocks the calling thread for the job's duration;
// call from a job thread, never from the event loop.
#pragma once

#include <chrono>
#include <functional>

#include "common/protocol/messages.hpp"
#include "worker/executor/busy_poll.hpp"
#include "worker/executor/session_table.hpp"
#include "worker/executor/warm_pool.hpp"
#include "worker/runtimes/runtime.hpp"

namespace kiln::worker {

class ToolMailbox;

struct RunOptions {
  std::string worker_id;
  uint64_t max_memory_mb = 4096;
  uint64_t max_timeout_ms = 3600'000;
  uint64_t max_output_bytes = 16u << 20;
  uint64_t max_collect_bytes = 10u << 20;
  // Sessions: how long an interrupted execution may take to stop before its
  // sandbox is destroyed.
  std::chrono::milliseconds interrupt_grace{2000};
  // Memory idle sessions may hold (session_table.hpp).
  IdleSessionBudget idle_sessions;
  // How long a session stays running after an execution before it is
  // stopped (SessionTable::Rest); 0: at once.
  std::chrono::milliseconds session_stop_after{0};
  // Called with each piece of output as it is read (streaming), if set.
  std::function<void(common::protocol::OutputChunk)> on_chunk;
  // Network on request: the egress lease's limit fd (EgressLease), readable
  // once the execution broke a network cap: it is stopped (network_limit).
  int network_limit_fd = -1;
  // Tool callbacks: where the broker's answers arrive, and how a call is
  // sent; without them the sandbox's fd 6 is not read (its calls wait).
  ToolMailbox* tool_answers = nullptr;
  std::function<void(common::protocol::ToolCall)> on_tool_call;
  // Busy polling (busy_poll.hpp): the worker's policy, and what the Executor
  // decided for this execution: how long its thread polls the sandbox
  // without sleeping once the execution starts.
  BusyPoll busy_poll;
  std::chrono::microseconds poll_without_sleep{0};
};

common::protocol::Result RunJob(const common::protocol::Execute& job, WarmSandbox& sandbox,
                                const runtimes::Runtime& runtime, const RunOptions& options,
                                int cancel_fd);

}  // namespace kiln::worker
