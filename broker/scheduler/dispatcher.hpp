// Dispatcher: the broker's worker-facing event loop. It owns the ZeroMQ
// ROUTER that workers connect to, the WorkerTable, the queue of jobs waiting
// for a worker slot and the jobs in flight.
//
//   ASSIGN_OR_RETURN(auto d, Dispatcher::Create(options, &zmq_ctx, &store, &waiters));
//   std::jthread loop([&](std::stop_token st) { d->Run(st); });
//   RETURN_IF_ERROR(d->Submit(spec));   // from any thread, after the job is in Redis
//
// Messages are handled by one table (type -> handler); each handler validates,
// then acts. Terminal records are written to Redis before waiters are told,
// so whatever a client reads back is stored. A worker that goes silent for
// heartbeat_interval x liveness is dead: its running jobs end WORKER_LOST
// (they are not re-run: code may have side effects).
// Run() belongs to one thread; Submit(), Cancel(), QueueDepth() and Workers() are
// thread-safe (they post to the loop through an eventfd-signalled inbox).
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "broker/job/job.hpp"
#include "broker/scheduler/job_waiters.hpp"
#include "broker/scheduler/worker_table.hpp"
#include "broker/store/job_store.hpp"
#include "common/protocol/messages.hpp"
#include "common/status.hpp"
#include "common/unique_fd.hpp"

namespace kiln::broker {

class BrokerMetrics;

struct DispatcherOptions {
  std::string broker_id;
  std::string endpoint;  // e.g. tcp://127.0.0.1:5555 (port 0 or * for ephemeral)
  std::chrono::milliseconds heartbeat_interval{1000};
  uint32_t liveness = 3;
  size_t max_queue = 10000;
  std::chrono::milliseconds runtime_wait{30000};  // queued with no worker offering the runtime
  // Per tenant: literal secrets the worker masks in what jobs return.
  std::map<std::string, std::vector<std::string>> tenant_secrets;
  BrokerMetrics* metrics = nullptr;  // optional; outlives the Dispatcher
};

// A copy of one worker's state for GET /v1/workers.
struct WorkerView {
  std::string id;
  std::string hostname;
  std::vector<std::string> runtimes;
  std::vector<std::string> sandbox_layers;
  uint32_t slots = 0;
  uint32_t running = 0;
  bool draining = false;
  int64_t registered_at_ms = 0;
  int64_t last_heartbeat_ms = 0;
  std::string metrics_endpoint;
};

class Dispatcher {
 public:
  static common::StatusOr<std::unique_ptr<Dispatcher>> Create(DispatcherOptions options,
                                                              zmq::context_t* ctx, JobStore* store,
                                                              JobWaiters* waiters);
  ~Dispatcher();
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  // The endpoint actually bound (resolves an ephemeral port).
  const std::string& endpoint() const { return bound_endpoint_; }

  // Thread-safe. QUEUE_FULL when max_queue jobs already wait.
  common::Status Submit(JobSpec spec);
  // Thread-safe. Cancels a job this broker holds: a queued one ends
  // `cancelled` at once; a running one is told to its worker, whose Result
  // (reason cancelled) ends it. Unknown or finished jobs are ignored.
  void Cancel(const std::string& job_id);
  size_t QueueDepth() const;
  std::vector<WorkerView> Workers() const;

  // The event loop; returns when `stop` is requested.
  void Run(std::stop_token stop);

 private:
  struct InFlight {
    JobSpec spec;
    JobRecord record;
    std::string worker;
  };
  using Handler = void (Dispatcher::*)(const std::string& identity,
                                       common::protocol::Message& message);

  Dispatcher(DispatcherOptions options, zmq::socket_t router, common::UniqueFd wake,
             JobStore* store, JobWaiters* waiters);

  void DrainInbox();
  void CancelNow(const std::string& job_id);
  void Wake();
  void ReceiveAll();
  void HandleRegister(const std::string& identity, common::protocol::Message& m);
  void HandleHeartbeat(const std::string& identity, common::protocol::Message& m);
  void HandleOutputChunk(const std::string& identity, common::protocol::Message& m);
  void HandleResult(const std::string& identity, common::protocol::Message& m);
  void FinishForeign(const std::string& identity, const common::protocol::Result& res);
  void HandleDisconnect(const std::string& identity, common::protocol::Message& m);
  void HandleUnexpected(const std::string& identity, common::protocol::Message& m);

  void Tick();
  void DispatchQueued();
  void FailQueuedWithoutRuntime();
  void FailOverdue();
  // Ends in-flight jobs of a lost worker with WORKER_LOST; returns how many.
  size_t LoseJobs(const std::string& worker, const std::vector<std::string>& job_ids,
                  const std::string& why);
  // Every terminal record passes here once: counts it, then Save()s it.
  void Finish(JobRecord record);
  // Writes a terminal record and wakes its waiters; keeps it for a retry
  // when Redis refuses it.
  void Save(JobRecord record);
  bool Send(const std::string& identity, const common::protocol::Message& m);
  void PublishWorkers();

  DispatcherOptions options_;
  zmq::socket_t router_;
  common::UniqueFd wake_;  // eventfd
  JobStore* store_;
  JobWaiters* waiters_;
  std::string bound_endpoint_;
  std::map<common::protocol::MessageType, Handler> handlers_;

  // Loop-owned state.
  WorkerTable table_;
  std::deque<JobSpec> queue_;
  std::map<std::string, InFlight> in_flight_;
  std::vector<JobRecord> unsaved_;  // terminal records Redis refused; retried each tick
  Clock::time_point next_tick_;

  // Shared with other threads.
  mutable std::mutex mu_;
  std::deque<JobSpec> inbox_;
  std::deque<std::string> cancels_;
  size_t queued_total_ = 0;  // inbox_ + queue_, for QUEUE_FULL
  std::vector<WorkerView> worker_views_;
};

}  // namespace kiln::broker
