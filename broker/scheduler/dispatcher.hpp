// Dispatcher: the broker's scheduling loop. It owns the WorkerTable and the
// jobs this broker has in flight, and the WorkerGateway (the ZeroMQ ROUTER
// workers connect to, and their liveness, on a thread that never waits on
// Redis); the queue and the slots live in Redis (ScheduleStore), shared with
// every other broker.
//
//   ASSIGN_OR_RETURN(auto d, Dispatcher::Create(options, &zmq_ctx, &stores, &waiters));
//   std::jthread loop([&](std::stop_token st) { d->Run(st); });
//   // An HTTP thread, after ScheduleStore::Submit started a job on a worker:
//   d->Start(std::move(spec), worker, epoch);
//
// The gateway hands over registrations, heartbeats, Results and deaths as
// events, and output chunks through an OutputBuffer this loop stores from,
// a budget at a time, a job's chunks always before its end. What a Result
// (or a loss) means for the job is JobLifecycle's decision; the terminal
// record goes through the JobFinisher, which stores it before waiters are
// told, so whatever a client reads back is stored; then the worker gets a
// ResultAck (until then it keeps the Result and sends it again after every
// reconnect), with its next Execute or within ResultAcks::kHold. When Redis
// refuses a record it is kept in memory (bounded) and retried every tick. A
// worker the gateway declares dead (silent for heartbeat_interval x
// liveness) has its running jobs end WORKER_LOST (they are not re-run: code
// may have side effects) and its sessions lost; a worker that reconnects as
// the same incarnation keeps the jobs it says it holds. Every tick renews
// this broker's leases and registration in Redis and takes over the jobs of
// brokers that stopped renewing theirs (dispatcher_recovery.cpp).
// Run() belongs to one thread (it runs the gateway on another); every other
// method is thread-safe (they post to the loop through an eventfd-signalled
// inbox, or read a snapshot).
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>
#include <zmq.hpp>

#include "broker/job/job.hpp"
#include "broker/job/lifecycle.hpp"
#include "broker/scheduler/job_finisher.hpp"
#include "broker/scheduler/job_waiters.hpp"
#include "broker/scheduler/output_buffer.hpp"
#include "broker/scheduler/renewal_gate.hpp"
#include "broker/scheduler/result_acks.hpp"
#include "broker/scheduler/spec_cache.hpp"
#include "broker/scheduler/worker_gateway.hpp"
#include "broker/scheduler/worker_table.hpp"
#include "broker/store/job_store.hpp"
#include "broker/store/schedule_store.hpp"
#include "broker/store/session_store.hpp"
#include "common/protocol/messages.hpp"
#include "common/status.hpp"
#include "common/unique_fd.hpp"

namespace kiln::broker {

class AuditWriter;
class WorkerKeyring;
class BrokerMetrics;

struct DispatcherOptions {
  std::string broker_id;
  std::string endpoint;  // e.g. tcp://127.0.0.1:5555 (port 0 or * for ephemeral)
  std::chrono::milliseconds heartbeat_interval{1000};
  uint32_t liveness = 3;
  uint32_t worker_slot_cap = 0;  // per-worker limit below the worker's own slots (0: none)
  // How often queued jobs are retried while any wait (slots can free up on
  // other brokers, leases expire, workers arrive).
  std::chrono::milliseconds pump_interval{100};
  // Output received and not yet stored, per job and in all (OutputBuffer).
  size_t output_buffer_job_bytes = 4u << 20;
  size_t output_buffer_bytes = 64u << 20;
  // Output stored per turn of the loop at most, so Results and other work
  // interleave with a flood's chunks.
  size_t output_flush_bytes = 8u << 20;
  // Terminal records kept in memory while Redis refuses them (bytes of output).
  size_t max_unsaved_bytes = 512u << 20;
  // Per tenant: literal secrets the worker masks in what jobs return.
  std::map<std::string, std::vector<std::string>> tenant_secrets;
  // Per tenant: slot limit and weight, published to Redis every tick.
  std::vector<ScheduleStore::TenantShare> tenant_shares;
  BrokerMetrics* metrics = nullptr;  // optional; outlives the Dispatcher
  AuditWriter* audit = nullptr;      // optional; gets every terminal record stored here
  // CURVE on the worker endpoint (GatewayOptions): both or neither.
  std::string curve_secret_key;
  WorkerKeyring* keyring = nullptr;  // outlives the Dispatcher
  // Workers' tool calls (GatewayOptions::on_tool_call).
  std::function<void(const std::string& worker, common::protocol::ToolCall)> on_tool_call;
};

struct DispatcherStores {
  JobStore* jobs;
  ScheduleStore* schedule;
  SessionStore* sessions;
};

// A copy of one worker's state for GET /v1/workers.
struct WorkerView {
  std::string id;
  std::string hostname;
  std::vector<std::string> runtimes;
  std::vector<std::string> sandbox_layers;
  std::string isolation;  // "standard" or "gvisor" (never empty)
  uint32_t slots = 0;
  uint32_t running = 0;
  bool draining = false;
  int64_t registered_at_ms = 0;
  int64_t last_heartbeat_ms = 0;
  std::string metrics_endpoint;
  std::shared_ptr<const RuntimeCatalog> catalog;  // versions and packages (GET /v1/runtimes)
};

class Dispatcher {
 public:
  static common::StatusOr<std::unique_ptr<Dispatcher>> Create(DispatcherOptions options,
                                                              zmq::context_t* ctx,
                                                              DispatcherStores stores,
                                                              JobWaiters* waiters);
  ~Dispatcher();
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  // The endpoint actually bound (resolves an ephemeral port).
  const std::string& endpoint() const { return gateway_->endpoint(); }

  // A job ScheduleStore started on `worker` (its leases are taken): send it.
  // `decided_ms`: the wall clock before the script that started it was sent.
  void Start(JobSpec spec, std::string worker, std::optional<SessionEpoch> session_epoch,
             int64_t decided_ms);
  // Jobs a script started, as returned by ScheduleStore.
  void StartAll(const std::vector<StartedJob>& started);
  // A job was queued: look for a slot soon.
  void Poke();
  // The submit script queued this job: Poke, and keep its spec for when a
  // script starts it (SpecCache).
  void Queued(JobSpec spec);
  // A submit whose answer from Redis was lost (SubmitOutcome::kUnconfirmed):
  // once Redis answers, if the script did start the job, it is sent (nobody
  // else ever will).
  void Unconfirmed(std::string job_id, int64_t decided_ms);
  // Cancels a job this broker has in flight (its worker is told; the
  // worker's Result ends it). Unknown or finished jobs are ignored.
  void Cancel(const std::string& job_id);
  // Queues a message for a worker (sent on the gateway's thread; dropped if
  // the worker is not connected here). Any thread.
  void SendToWorker(const std::string& worker, common::protocol::Message m) {
    Send(worker, std::move(m));
  }
  // A deleted session: its worker destroys the session's sandbox.
  void CloseSession(const std::string& worker, const std::string& session_id);
  // Carries out a lifecycle transition's JobAction::kStoreEnd for a job that
  // is not in flight here (cancelled, denied, lost session, ...): stores the
  // terminal record if the job is still in `t.from`, counts it, wakes its
  // waiters, and starts whatever its slot lets run.
  common::StatusOr<FinishOutcome> EndJob(const JobTransition& t);
  // An admin approved a job awaiting approval; starts it if a slot is free.
  common::StatusOr<ApproveOutcome> Approve(const std::string& job_id, bool trust_session,
                                           const std::string& approver);

  // Workers that may be sent jobs (for ScheduleStore::Submit).
  std::vector<WorkerSlots> Candidates() const;
  // Runtimes offered by live workers, at any isolation level.
  std::vector<std::string> Runtimes() const;
  // Isolation levels offered by live workers.
  std::vector<std::string> IsolationLevels() const;
  // Runtimes offered by live workers of isolation `level`.
  std::vector<std::string> RuntimesAt(std::string_view level) const;
  // Jobs waiting in every tenant's queue, as of the last tick.
  size_t QueueDepth() const;
  std::vector<WorkerView> Workers() const;

  // The event loop; returns when `stop` is requested.
  void Run(std::stop_token stop);

 private:
  struct InFlight {
    JobSpec spec;
    JobRecord record;
    std::string worker;
    StoredOutput stored;  // how much of its output this broker saw stored
  };
  struct StartRequest {
    JobSpec spec;
    std::string worker;
    std::optional<SessionEpoch> session_epoch;
    int64_t decided_ms = 0;  // when the script that started it was sent
  };

  Dispatcher(DispatcherOptions options, common::UniqueFd wake, DispatcherStores stores,
             JobWaiters* waiters);

  void DrainInbox();
  void SendStart(StartRequest req);
  void CancelNow(const std::string& job_id);
  void Wake();
  void Send(const std::string& worker, common::protocol::Message m);

  // Gateway events, in the order they happened.
  void HandleEvents();
  void OnRegistered(WorkerRegistered& e);
  void OnBeat(WorkerBeat& e);
  void OnResult(WorkerResult& e);
  void OnGone(WorkerGone& e);
  void OnUndeliverable(Undeliverable& e);
  void FinishForeign(const std::string& worker, const common::protocol::Result& res);
  // Stores buffered output (jobs' chunks in order; what Redis refuses is
  // left to the jobs' ends to complete).
  void StoreOutput(std::vector<JobOutput> batch);

  void Tick();
  void Pump();
  void RenewLeases();
  // Marks the worker's sessions lost and ends their queued executions;
  // false if Redis refused.
  bool LoseSessions(const std::string& worker);
  // Sends the unconfirmed submits that Redis did start (each tick, until
  // Redis answers).
  void ResolveUnconfirmed();
  // A queued execution of a session whose worker died: SESSION_LOST.
  void EndLostExecution(const JobSpec& spec);
  // False when Redis could not be asked.
  bool TakeOver(bool include_self);
  // Holds a job running on `id`'s worker (its leases renewed, its result or
  // the overdue check ends it); false if it is not running or held already.
  bool Adopt(const std::string& id, const char* why);
  // Jobs running on this broker's name that it does not hold: a submit whose
  // answer was lost, a requeue Redis refused, a claimed job not loaded.
  void AdoptStrays(const std::vector<std::string>& strays);
  // False when Redis could not take it (the caller keeps what it needs).
  bool Requeue(const std::string& job_id);
  void FailOverdue();
  // A worker is gone: its jobs here end WORKER_LOST, its sessions are lost.
  // `expired`: it missed its heartbeats (counted as lost even without jobs).
  void LoseWorker(const std::string& worker, const std::vector<std::string>& job_ids,
                  const std::string& why, bool expired = false);
  // Ends these jobs WORKER_LOST (their worker no longer has them).
  size_t LoseJobs(const std::string& worker, const std::vector<std::string>& job_ids,
                  const std::string& why);
  // A Result's session lost its state: the record gets a new session epoch.
  void RenewEpoch(const common::protocol::Result& res, JobRecord* record);
  void ExpireApprovals(const std::vector<std::string>& ids);
  void PublishWorkers();

  DispatcherOptions options_;
  common::UniqueFd wake_;  // eventfd
  DispatcherStores stores_;
  JobWaiters* waiters_;
  OutputBuffer output_;
  std::unique_ptr<WorkerGateway> gateway_;
  JobFinisher finisher_;  // every terminal record of a job
  ResultAcks acks_;       // acks of stored ends, sent with the next message

  // Loop-owned state.
  WorkerTable table_;
  std::map<std::string, InFlight> in_flight_;
  std::set<std::string> sessions_to_lose_;  // workers whose LoseSessions Redis refused
  Clock::time_point started_at_;
  RenewalGate renewals_;  // when we may take other brokers over
  Clock::time_point next_tick_;
  Clock::time_point next_pump_;
  bool pump_due_ = false;
  bool took_over_self_ = false;

  // Shared with other threads.
  mutable std::mutex mu_;
  std::deque<StartRequest> inbox_;
  std::deque<std::string> cancels_;
  std::deque<std::pair<std::string, int64_t>> unconfirmed_;  // job id, decided_ms
  std::deque<std::pair<std::string, std::string>> closes_;   // worker, session
  bool poked_ = false;
  size_t queued_total_ = 0;  // every tenant's queue, from the last tick
  std::vector<WorkerView> worker_views_;
  std::vector<WorkerSlots> candidates_;
  SpecCache queued_specs_;  // thread-safe on its own
};

}  // namespace kiln::broker
