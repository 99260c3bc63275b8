// BrokerMetrics: the broker's Prometheus metrics (docs/architecture.md,
// "Metrics") in one registry, rendered as the text exposition for GET /metrics.
//
//   BrokerMetrics metrics;
//   metrics.Finished(record);  std::string text = metrics.Render();
//
// Labels are bounded: tenant (from the config), language (validated), status,
// HTTP route name and code; never job, session or worker ids. Every method is
// thread-safe (prometheus-cpp metrics are): the dispatcher loop and the HTTP
// threads update it concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "broker/job/job.hpp"
#include "broker/store/schedule_store.hpp"

namespace prometheus {
class Registry;
class Counter;
class Gauge;
class Histogram;
template <typename T>
class Family;
}  // namespace prometheus

namespace kiln::broker {

class BrokerMetrics {
 public:
  BrokerMetrics();
  ~BrokerMetrics();
  BrokerMetrics(const BrokerMetrics&) = delete;
  BrokerMetrics& operator=(const BrokerMetrics&) = delete;

  // A job accepted by POST /v1/executions (stored and queued).
  void Submitted(const std::string& tenant, const std::string& language);
  // Sent to a worker (dispatched).
  void Started(const std::string& tenant, const std::string& language);
  // Registered workers silent for a whole heartbeat interval, counted per interval.
  void HeartbeatsMissed(size_t n);
  // A terminal record, counted once (Dispatcher::Finish).
  void Finished(const JobRecord& record);
  // A webhook try: outcome delivered, failed (tried again later) or given_up.
  void WebhookDelivery(const std::string& tenant, const std::string& outcome);
  // A tool call relayed by this broker (docs/api.md, "Tool callbacks"):
  // outcome forwarded (to the client), refused (undeclared, invalid
  // arguments, over a limit), answered or error (the client's answer, taken here).
  void ToolCall(const std::string& tenant, const std::string& outcome);
  // Cluster-wide scheduling gauges from Redis (every broker reports the
  // same values: dashboards take max over brokers).
  void SetSchedule(const TickOutcome& tick);
  // Limits from the config (0: none), exported so saturation can be graphed.
  void SetLimits(uint64_t global_slots,
                 const std::vector<std::pair<std::string, uint64_t>>& tenant_slots);
  // One scheduling script's round trip (`op`: submit, finish, pump, tick, load).
  void RedisCall(const std::string& op, double seconds);
  // A job a worker refused (no free slot there), put back in its queue.
  void Requeued();
  // A running job adopted from a broker that stopped.
  void TakenOver();
  // Governance. `outcome`: approved, denied, expired (a job's approval);
  // `action`: block or warn (a policy rule matched).
  void Approval(const std::string& tenant, const std::string& outcome);
  void PolicyHit(const std::string& tenant, const std::string& language, const std::string& rule,
                 const std::string& action);
  void AuditError();
  // Sums over live workers.
  void SetWorkers(size_t live, uint64_t slots, uint64_t slots_busy);
  // A worker declared dead, or gone with jobs (`jobs` of them lost).
  void WorkerLost();
  // The worker endpoint refused a connection or message (worker_refused_).
  void WorkerRefused(const std::string& reason);
  void JobsWorkerLost(size_t jobs);
  // `route` is a route name ("submit", "get", ...), never a path.
  void HttpRequest(const std::string& route, int code);
  // Native ZeroMQ client protocol: one request of `type` (submit, subscribe,
  // cancel, get, or "malformed"); one error answered with API code `code`;
  // subscriptions open now.
  void NativeRequest(const std::string& type);
  void NativeError(const std::string& code);
  void SetNativeSubscriptions(size_t open);
  void RedisError();
  // Output chunks from workers: dropped because the broker's buffer for
  // the job or for all jobs was full (the job's end completes its stream);
  // stored as `entries` Redis stream entries (coalesced).
  void OutputChunkDropped();
  void OutputStored(size_t entries);
  // As of a scrape: output bytes waiting to be stored, results waiting for
  // Redis (kept in memory, unacknowledged, until stored).
  void SetOutputPending(size_t bytes);
  void SetResultsUnsaved(size_t results);
  // Native client connections (broker/native/client_connections.hpp): held
  // now; closed by the broker, by reason (limit, address_limit, auth_timeout,
  // bad_frames).
  void SetNativeConnections(size_t open);
  void NativeConnectionClosed(const std::string& reason);
  // The HTTP front end, as of a scrape: connections open (both lanes), of
  // them on the reserve lane, requests waiting for a job's end, open event
  // streams, and readers the output follower serves (SSE and native).
  void SetHttpFront(size_t connections, size_t reserve, size_t waits, size_t streams,
                    size_t followers);

  // The text exposition format (version 0.0.4).
  std::string Render() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* submitted_;
  prometheus::Family<prometheus::Counter>* started_;
  prometheus::Counter* heartbeats_missed_;
  prometheus::Family<prometheus::Counter>* finished_;
  prometheus::Family<prometheus::Histogram>* duration_;
  prometheus::Family<prometheus::Histogram>* queue_wait_;
  prometheus::Family<prometheus::Counter>* redactions_;
  prometheus::Family<prometheus::Counter>* output_bytes_;
  prometheus::Family<prometheus::Counter>* cpu_seconds_;
  prometheus::Family<prometheus::Counter>* webhooks_;
  prometheus::Family<prometheus::Counter>* tool_calls_;
  prometheus::Family<prometheus::Counter>* network_bytes_;
  prometheus::Family<prometheus::Counter>* network_connections_;
  prometheus::Family<prometheus::Counter>* http_requests_;
  prometheus::Family<prometheus::Counter>* native_requests_;
  prometheus::Family<prometheus::Counter>* native_errors_;
  prometheus::Gauge* native_subscriptions_;
  prometheus::Family<prometheus::Gauge>* queue_length_;
  prometheus::Family<prometheus::Gauge>* tenant_slots_busy_;
  prometheus::Family<prometheus::Gauge>* tenant_slots_limit_;
  prometheus::Family<prometheus::Histogram>* redis_latency_;
  prometheus::Gauge* global_slots_busy_;
  prometheus::Gauge* global_slots_limit_;
  prometheus::Gauge* brokers_live_;
  prometheus::Gauge* sessions_live_;
  prometheus::Counter* requeued_;
  prometheus::Counter* taken_over_;
  prometheus::Family<prometheus::Counter>* approvals_;
  prometheus::Family<prometheus::Counter>* policy_hits_;
  prometheus::Gauge* approvals_pending_;
  prometheus::Counter* audit_errors_;
  prometheus::Gauge* workers_live_;
  prometheus::Gauge* worker_slots_;
  prometheus::Gauge* worker_slots_busy_;
  prometheus::Counter* workers_lost_;
  prometheus::Family<prometheus::Counter>* worker_refused_;
  prometheus::Counter* jobs_worker_lost_;
  prometheus::Counter* redis_errors_;
  prometheus::Counter* output_chunks_dropped_;
  prometheus::Counter* output_entries_stored_;
  prometheus::Gauge* output_pending_bytes_;
  prometheus::Gauge* results_unsaved_;
  prometheus::Gauge* native_connections_;
  prometheus::Family<prometheus::Counter>* native_connections_closed_;
  prometheus::Gauge* http_connections_;
  prometheus::Gauge* http_reserve_connections_;
  prometheus::Gauge* http_waits_;
  prometheus::Gauge* http_streams_;
  prometheus::Gauge* output_followers_;
};

}  // namespace kiln::broker
