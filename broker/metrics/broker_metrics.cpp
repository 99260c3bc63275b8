#include "broker/metrics/broker_metrics.hpp"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "common/metrics/metrics_common.hpp"

namespace kiln::broker {
using common::SecondsBuckets;

BrokerMetrics::BrokerMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  auto& r = *registry_;
  submitted_ = &prometheus::BuildCounter()
                    .Name("kiln_executions_submitted_total")
                    .Help("Executions accepted by POST /v1/executions")
                    .Register(r);
  started_ = &prometheus::BuildCounter()
                  .Name("kiln_executions_started_total")
                  .Help("Executions this broker sent to a worker (a requeued one counts again)")
                  .Register(r);
  heartbeats_missed_ = &prometheus::BuildCounter()
                            .Name("kiln_heartbeats_missed_total")
                            .Help("Heartbeat intervals in which a registered worker sent nothing")
                            .Register(r)
                            .Add({});
  finished_ = &prometheus::BuildCounter()
                   .Name("kiln_executions_finished_total")
                   .Help("Executions that reached a terminal status")
                   .Register(r);
  duration_ = &prometheus::BuildHistogram()
                   .Name("kiln_execution_duration_seconds")
                   .Help("Run time of finished executions as the worker measured it")
                   .Register(r);
  queue_wait_ = &prometheus::BuildHistogram()
                     .Name("kiln_queue_wait_seconds")
                     .Help("Time executions waited between submission and dispatch")
                     .Register(r);
  redactions_ = &prometheus::BuildCounter()
                     .Name("kiln_redactions_total")
                     .Help("Secret occurrences masked in what executions returned")
                     .Register(r);
  output_bytes_ = &prometheus::BuildCounter()
                       .Name("kiln_output_bytes_total")
                       .Help("stdout and stderr bytes of finished executions")
                       .Register(r);
  cpu_seconds_ = &prometheus::BuildCounter()
                      .Name("kiln_cpu_seconds_total")
                      .Help(
                          "CPU time of finished executions, per tenant (the sandbox's, as its "
                          "worker measured it)")
                      .Register(r);
  webhooks_ = &prometheus::BuildCounter()
                   .Name("kiln_webhook_deliveries_total")
                   .Help(
                       "Webhook tries per tenant: delivered, failed (tried again later), "
                       "given_up")
                   .Register(r);
  tool_calls_ = &prometheus::BuildCounter()
                     .Name("kiln_tool_calls_total")
                     .Help(
                         "Tool calls relayed per tenant: forwarded, refused, answered, error "
                         "(docs/api.md, Tool callbacks)")
                     .Register(r);
  network_bytes_ = &prometheus::BuildCounter()
                        .Name("kiln_network_bytes_total")
                        .Help(
                            "Bytes jobs moved through their workers' egress gateways, by "
                            "tenant and direction (in: to the job, out: from it)")
                        .Register(r);
  network_connections_ = &prometheus::BuildCounter()
                              .Name("kiln_network_connections_total")
                              .Help(
                                  "Connections jobs asked their egress gateways for, by tenant "
                                  "and outcome (allowed, refused)")
                              .Register(r);
  http_requests_ = &prometheus::BuildCounter()
                        .Name("kiln_http_requests_total")
                        .Help("HTTP requests answered, by route and status code")
                        .Register(r);
  native_requests_ = &prometheus::BuildCounter()
                          .Name("kiln_native_requests_total")
                          .Help("Requests on the native ZeroMQ client protocol, by message type")
                          .Register(r);
  native_errors_ = &prometheus::BuildCounter()
                        .Name("kiln_native_errors_total")
                        .Help("Native client protocol requests answered with an error, by API code")
                        .Register(r);
  native_subscriptions_ = &prometheus::BuildGauge()
                               .Name("kiln_native_subscriptions")
                               .Help("Native client protocol subscriptions open on this broker")
                               .Register(r)
                               .Add({});
  queue_length_ = &prometheus::BuildGauge()
                       .Name("kiln_queue_length")
                       .Help("Executions waiting in a tenant's queue (cluster-wide, from Redis)")
                       .Register(r);
  tenant_slots_busy_ = &prometheus::BuildGauge()
                            .Name("kiln_tenant_slots_busy")
                            .Help("Slot leases a tenant holds (cluster-wide)")
                            .Register(r);
  tenant_slots_limit_ = &prometheus::BuildGauge()
                             .Name("kiln_tenant_slots_limit")
                             .Help("A tenant's concurrency limit (tenants with one)")
                             .Register(r);
  redis_latency_ = &prometheus::BuildHistogram()
                        .Name("kiln_redis_call_seconds")
                        .Help("Round trip of the broker's Redis scheduling calls")
                        .Register(r);
  global_slots_busy_ = &prometheus::BuildGauge()
                            .Name("kiln_global_slots_busy")
                            .Help("Slot leases held cluster-wide")
                            .Register(r)
                            .Add({});
  global_slots_limit_ = &prometheus::BuildGauge()
                             .Name("kiln_global_slots_limit")
                             .Help("The global concurrency limit (0: none beyond workers' slots)")
                             .Register(r)
                             .Add({});
  brokers_live_ = &prometheus::BuildGauge()
                       .Name("kiln_brokers_live")
                       .Help("Brokers registered in Redis and renewing")
                       .Register(r)
                       .Add({});
  sessions_live_ = &prometheus::BuildGauge()
                        .Name("kiln_sessions_live")
                        .Help("Sessions known in Redis (idle, busy or lost, until they expire)")
                        .Register(r)
                        .Add({});
  requeued_ = &prometheus::BuildCounter()
                   .Name("kiln_executions_requeued_total")
                   .Help("Started executions a worker refused, put back in their queue")
                   .Register(r)
                   .Add({});
  taken_over_ = &prometheus::BuildCounter()
                     .Name("kiln_executions_taken_over_total")
                     .Help("Running executions adopted from a broker that stopped")
                     .Register(r)
                     .Add({});
  workers_live_ = &prometheus::BuildGauge()
                       .Name("kiln_workers_live")
                       .Help("Workers registered and alive")
                       .Register(r)
                       .Add({});
  worker_slots_ = &prometheus::BuildGauge()
                       .Name("kiln_worker_slots")
                       .Help("Job slots of live workers")
                       .Register(r)
                       .Add({});
  worker_slots_busy_ = &prometheus::BuildGauge()
                            .Name("kiln_worker_slots_busy")
                            .Help("Busy job slots of live workers")
                            .Register(r)
                            .Add({});
  workers_lost_ = &prometheus::BuildCounter()
                       .Name("kiln_workers_lost_total")
                       .Help("Workers declared dead, or gone while running jobs")
                       .Register(r)
                       .Add({});
  jobs_worker_lost_ = &prometheus::BuildCounter()
                           .Name("kiln_jobs_worker_lost_total")
                           .Help("Executions ended WORKER_LOST")
                           .Register(r)
                           .Add({});
  redis_errors_ = &prometheus::BuildCounter()
                       .Name("kiln_redis_errors_total")
                       .Help("Redis calls that failed")
                       .Register(r)
                       .Add({});
  output_chunks_dropped_ =
      &prometheus::BuildCounter()
           .Name("kiln_output_chunks_dropped_total")
           .Help(
               "Output chunks not stored live because the broker's output buffer was full "
               "(the job's end completes its stream from the result)")
           .Register(r)
           .Add({});
  output_entries_stored_ = &prometheus::BuildCounter()
                                .Name("kiln_output_entries_stored_total")
                                .Help("Output stream entries stored in Redis (coalesced chunks)")
                                .Register(r)
                                .Add({});
  output_pending_bytes_ = &prometheus::BuildGauge()
                               .Name("kiln_output_pending_bytes")
                               .Help("Output bytes received from workers, not yet stored")
                               .Register(r)
                               .Add({});
  results_unsaved_ = &prometheus::BuildGauge()
                          .Name("kiln_results_unsaved")
                          .Help("Job results held in memory until Redis takes them")
                          .Register(r)
                          .Add({});
  approvals_ = &prometheus::BuildCounter()
                    .Name("kiln_approvals_total")
                    .Help("Jobs that needed approval, by outcome (approved, denied, expired)")
                    .Register(r);
  policy_hits_ = &prometheus::BuildCounter()
                      .Name("kiln_policy_matches_total")
                      .Help("Policy rules that matched submitted code, by action (block, warn)")
                      .Register(r);
  approvals_pending_ = &prometheus::BuildGauge()
                            .Name("kiln_approvals_pending")
                            .Help("Jobs awaiting an admin's approval (cluster-wide)")
                            .Register(r)
                            .Add({});
  audit_errors_ = &prometheus::BuildCounter()
                       .Name("kiln_audit_errors_total")
                       .Help("Audit entries that could not be written")
                       .Register(r)
                       .Add({});
  native_connections_ = &prometheus::BuildGauge()
                             .Name("kiln_native_connections")
                             .Help("Connections to the native client endpoint held now")
                             .Register(r)
                             .Add({});
  native_connections_closed_ =
      &prometheus::BuildCounter()
           .Name("kiln_native_connections_closed_total")
           .Help(
               "Native client connections the broker closed, by reason (limit, "
               "address_limit, auth_timeout, bad_frames, stalled)")
           .Register(r);
  for (const char* reason : {"limit", "address_limit", "auth_timeout", "bad_frames", "stalled"}) {
    native_connections_closed_->Add({{"reason", reason}});
  }
  worker_refused_ = &prometheus::BuildCounter()
                         .Name("kiln_worker_refused_total")
                         .Help(
                             "Connections and messages the worker endpoint refused, by reason "
                             "(unknown_key, handshake, registration, unregistered, revoked, "
                             "not_its_job)")
                         .Register(r);
  for (const char* reason :
       {"unknown_key", "handshake", "registration", "unregistered", "revoked", "not_its_job"}) {
    worker_refused_->Add({{"reason", reason}});
  }
  auto gauge = [&r](const char* name, const char* help) {
    return &prometheus::BuildGauge().Name(name).Help(help).Register(r).Add({});
  };
  http_connections_ = gauge("kiln_http_connections", "HTTP connections open now (both lanes)");
  http_reserve_connections_ =
      gauge("kiln_http_reserve_connections",
            "HTTP connections on the reserve lane (health and metrics only), open now");
  http_waits_ = gauge("kiln_http_waits", "HTTP requests waiting for a job's end (wait, cancel)");
  http_streams_ = gauge("kiln_http_streams", "Open event streams (SSE)");
  output_followers_ = gauge("kiln_output_followers",
                            "Output readers (SSE streams and native subscriptions) followed");
  common::RegisterBuildInfo(r);
}

BrokerMetrics::~BrokerMetrics() = default;

void BrokerMetrics::Submitted(const std::string& tenant, const std::string& language) {
  submitted_->Add({{"tenant", tenant}, {"language", language}}).Increment();
}

void BrokerMetrics::Started(const std::string& tenant, const std::string& language) {
  started_->Add({{"tenant", tenant}, {"language", language}}).Increment();
}

void BrokerMetrics::HeartbeatsMissed(size_t n) {
  heartbeats_missed_->Increment(static_cast<double>(n));
}

void BrokerMetrics::Finished(const JobRecord& record) {
  finished_
      ->Add({{"tenant", record.tenant},
             {"language", record.language},
             {"status", JobStatusName(record.status)}})
      .Increment();
  if (record.duration_ms) {
    duration_->Add({{"language", record.language}}, SecondsBuckets())
        .Observe(*record.duration_ms / 1000.0);
  }
  if (record.queued_ms) {
    queue_wait_->Add({{"tenant", record.tenant}}, SecondsBuckets())
        .Observe(*record.queued_ms / 1000.0);
  }
  redactions_->Add({{"tenant", record.tenant}}).Increment(record.redactions);
  output_bytes_->Add({{"tenant", record.tenant}})
      .Increment(static_cast<double>(record.stdout_data.size() + record.stderr_data.size()));
  if (record.cpu_ms && *record.cpu_ms > 0) {
    cpu_seconds_->Add({{"tenant", record.tenant}}).Increment(*record.cpu_ms / 1000.0);
  }
  if (record.network) {
    const common::NetworkUsage& n = *record.network;
    network_bytes_->Add({{"tenant", record.tenant}, {"direction", "in"}})
        .Increment(static_cast<double>(n.bytes_in));
    network_bytes_->Add({{"tenant", record.tenant}, {"direction", "out"}})
        .Increment(static_cast<double>(n.bytes_out));
    network_connections_->Add({{"tenant", record.tenant}, {"outcome", "allowed"}})
        .Increment(static_cast<double>(n.connections));
    network_connections_->Add({{"tenant", record.tenant}, {"outcome", "refused"}})
        .Increment(static_cast<double>(n.refused));
  }
}

void BrokerMetrics::WebhookDelivery(const std::string& tenant, const std::string& outcome) {
  webhooks_->Add({{"tenant", tenant}, {"outcome", outcome}}).Increment();
}

void BrokerMetrics::ToolCall(const std::string& tenant, const std::string& outcome) {
  tool_calls_->Add({{"tenant", tenant}, {"outcome", outcome}}).Increment();
}

void BrokerMetrics::SetSchedule(const TickOutcome& tick) {
  for (const auto& t : tick.tenants) {
    queue_length_->Add({{"tenant", t.name}}).Set(static_cast<double>(t.queued));
    tenant_slots_busy_->Add({{"tenant", t.name}}).Set(static_cast<double>(t.leases));
  }
  global_slots_busy_->Set(static_cast<double>(tick.global_leases));
  brokers_live_->Set(static_cast<double>(tick.brokers_live));
  sessions_live_->Set(static_cast<double>(tick.sessions));
  approvals_pending_->Set(static_cast<double>(tick.approvals_pending));
}

void BrokerMetrics::SetLimits(uint64_t global_slots,
                              const std::vector<std::pair<std::string, uint64_t>>& tenant_slots) {
  global_slots_limit_->Set(static_cast<double>(global_slots));
  for (const auto& [tenant, slots] : tenant_slots) {
    if (slots > 0) tenant_slots_limit_->Add({{"tenant", tenant}}).Set(static_cast<double>(slots));
  }
}

void BrokerMetrics::RedisCall(const std::string& op, double seconds) {
  // A loopback round trip is ~0.1 ms: buckets from 50 us.
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 2};
  redis_latency_->Add({{"op", op}}, kBuckets).Observe(seconds);
}

void BrokerMetrics::Requeued() { requeued_->Increment(); }

void BrokerMetrics::TakenOver() { taken_over_->Increment(); }

void BrokerMetrics::Approval(const std::string& tenant, const std::string& outcome) {
  approvals_->Add({{"tenant", tenant}, {"outcome", outcome}}).Increment();
}

void BrokerMetrics::PolicyHit(const std::string& tenant, const std::string& language,
                              const std::string& rule, const std::string& action) {
  policy_hits_
      ->Add({{"tenant", tenant}, {"language", language}, {"rule", rule}, {"action", action}})
      .Increment();
}

void BrokerMetrics::AuditError() { audit_errors_->Increment(); }

void BrokerMetrics::SetWorkers(size_t live, uint64_t slots, uint64_t slots_busy) {
  workers_live_->Set(static_cast<double>(live));
  worker_slots_->Set(static_cast<double>(slots));
  worker_slots_busy_->Set(static_cast<double>(slots_busy));
}

void BrokerMetrics::WorkerLost() { workers_lost_->Increment(); }

void BrokerMetrics::OutputChunkDropped() { output_chunks_dropped_->Increment(); }

void BrokerMetrics::OutputStored(size_t entries) {
  output_entries_stored_->Increment(static_cast<double>(entries));
}

void BrokerMetrics::SetOutputPending(size_t bytes) {
  output_pending_bytes_->Set(static_cast<double>(bytes));
}

void BrokerMetrics::SetResultsUnsaved(size_t results) {
  results_unsaved_->Set(static_cast<double>(results));
}

void BrokerMetrics::JobsWorkerLost(size_t jobs) {
  jobs_worker_lost_->Increment(static_cast<double>(jobs));
}

void BrokerMetrics::NativeRequest(const std::string& type) {
  native_requests_->Add({{"type", type}}).Increment();
}

void BrokerMetrics::NativeError(const std::string& code) {
  native_errors_->Add({{"code", code}}).Increment();
}

void BrokerMetrics::SetNativeSubscriptions(size_t open) {
  native_subscriptions_->Set(static_cast<double>(open));
}

void BrokerMetrics::HttpRequest(const std::string& route, int code) {
  http_requests_->Add({{"route", route}, {"code", std::to_string(code)}}).Increment();
}

void BrokerMetrics::RedisError() { redis_errors_->Increment(); }

void BrokerMetrics::SetNativeConnections(size_t open) {
  native_connections_->Set(static_cast<double>(open));
}

void BrokerMetrics::WorkerRefused(const std::string& reason) {
  worker_refused_->Add({{"reason", reason}}).Increment();
}

void BrokerMetrics::NativeConnectionClosed(const std::string& reason) {
  native_connections_closed_->Add({{"reason", reason}}).Increment();
}

void BrokerMetrics::SetHttpFront(size_t connections, size_t reserve, size_t waits, size_t streams,
                                 size_t followers) {
  http_connections_->Set(static_cast<double>(connections));
  http_reserve_connections_->Set(static_cast<double>(reserve));
  http_waits_->Set(static_cast<double>(waits));
  http_streams_->Set(static_cast<double>(streams));
  output_followers_->Set(static_cast<double>(followers));
}

std::string BrokerMetrics::Render() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace kiln::broker
