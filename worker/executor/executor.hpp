// Executor: runs jobs on a fixed number of slots, one thread per running job
// (reused from job to job: JobThreads), and reports their Results through
// the EventQueue. One-shot jobs take a fresh warm sandbox each; session
// executions run in their session's long-lived sandbox (SessionTable).
//
//   Executor ex(options, &pool, &events);
//   RETURN_IF_ERROR(ex.Start(execute, broker));   // from the event loop
//   ex.Cancel(job_id);
//
// A one-shot job takes a warm sandbox from the WarmPool, runs (RunJob), posts
// its Result to the broker it came from, then destroys the sandbox. Every
// method is thread-safe; the destructor waits for running jobs to end.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/protocol/messages.hpp"
#include "common/status.hpp"
#include "common/unique_fd.hpp"
#include "worker/egress/egress_gateway.hpp"
#include "worker/executor/event_queue.hpp"
#include "worker/executor/job_runner.hpp"
#include "worker/executor/job_threads.hpp"
#include "worker/executor/session_table.hpp"
#include "worker/executor/tool_channel.hpp"
#include "worker/executor/warm_pool.hpp"

namespace kiln::worker {

class WorkerMetrics;

class Executor {
 public:
  // `metrics` and `packages` are optional and outlive the Executor; without
  // `packages`, jobs that ask for packages end PACKAGE_INSTALL_FAILED.
  // Without `egress`, jobs that ask for network end error NETWORK_NOT_ALLOWED.
  Executor(RunOptions options, uint32_t slots, WarmPool* pool, EventQueue* events,
           WorkerMetrics* metrics = nullptr, PackageCache* packages = nullptr,
           EgressGateway* egress = nullptr);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // RUNTIME_UNAVAILABLE for a runtime this worker lacks; UNAVAILABLE when all
  // slots are busy or the job id is already running.
  common::Status Start(common::protocol::Execute job, std::string broker);
  // Ends a running job with reason cancelled; unknown ids are ignored.
  void Cancel(const std::string& job_id);
  // The broker's answer to a running job's tool call (ToolChannel); for a
  // job not running here it is ignored.
  void DeliverToolResult(common::protocol::ToolResult result);
  void CancelAll();
  // Sessions: a deleted session's sandbox goes; idle ones expire.
  void CloseSession(const std::string& session_id);
  size_t ExpireSessions();
  size_t Sessions() const { return sessions_.size(); }
  // Reads the cgroup usage of all this worker's sandboxes into the metrics
  // (two small files); the event loop calls it about once a second. Does
  // nothing without metrics or cgroups.
  void RefreshCgroupUsage();

  uint32_t slots() const { return slots_; }
  uint32_t Running() const;
  // Ids of the jobs holding a slot. A job leaves this list in the same step
  // that posts its Result to the EventQueue, so a caller that lists these
  // and then drains the queue sees every job in one or the other.
  std::vector<std::string> RunningJobs() const;
  // Blocks until no job runs or the timeout passes; true when idle.
  bool WaitIdle(std::chrono::milliseconds timeout);

 private:
  void RunOne(common::protocol::Execute job, std::string broker, int cancel_fd,
              ToolMailbox* tool_answers);
  // Runs a session execution and hands its Result to `deliver`; then,
  // still holding the session, freezes it until its next execution.
  void RunSession(const common::protocol::Execute& job, const RunOptions& opts, int cancel_fd,
                  const std::function<void(common::protocol::Result)>& deliver);

  RunOptions options_;
  uint32_t slots_;
  WarmPool* pool_;
  EventQueue* events_;
  // Installs a job's `packages` (blocking its job thread) and mounts them
  // into its sandbox at /packages; a session keeps the union of its
  // executions' packages.
  common::StatusOr<std::shared_ptr<const PackageSet>> AcquirePackages(
      const std::string& tenant, const std::string& language, const std::vector<std::string>& specs,
      int cancel_fd);
  common::Status MountSessionPackages(const common::protocol::Execute& job, int cancel_fd,
                                      SessionSandbox& session);

  WorkerMetrics* metrics_;
  PackageCache* packages_;
  EgressGateway* egress_;
  SessionTable sessions_;

  mutable std::mutex mu_;
  std::condition_variable idle_;
  // When the last execution ended (its Result posted), for BusyPoll.
  std::optional<std::chrono::steady_clock::time_point> last_end_;
  struct RunningJob {
    common::UniqueFd cancel;  // eventfd
    std::shared_ptr<ToolMailbox> tool_answers;
  };
  std::map<std::string, RunningJob> running_;  // by job id
  uint32_t threads_ = 0;                       // jobs on a thread, including sandbox teardown
  // Last: destroyed first, after the destructor has waited for every job.
  JobThreads job_threads_;
};

// Network on request for one execution in `process`'s sandbox (a one-shot
// job's, or a session's for one execution): listens in its network
// namespace for the gateway, and adds the proxy variables (HTTP_PROXY,
// HTTPS_PROXY and their lowercase forms) to *job's env. Null when the job
// asked for no network; NETWORK_NOT_ALLOWED when this worker cannot give it.
common::StatusOr<std::unique_ptr<EgressLease>> OpenEgress(EgressGateway* gateway,
                                                          common::protocol::Execute* job,
                                                          sandbox::SandboxProcess& process);
// What the lease counted, onto the execution's Result (and which cap was
// broken, for a network_limit end).
void FinishEgress(EgressLease* lease, common::protocol::Result* result);

// ErrorResult for a job whose packages could not be made ready; a cancel
// during the install ends it `cancelled`.
common::protocol::Result PackageErrorResult(const common::protocol::Execute& job,
                                            const common::Status& st);

}  // namespace kiln::worker
