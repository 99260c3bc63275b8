// BrokerConfig: everything kiln-broker reads from its YAML file, with defaults.
//
//   ASSIGN_OR_RETURN(BrokerConfig cfg, LoadBrokerConfig("/etc/kiln/broker.yaml"));
//
// docs/configuration.md documents every key. Unknown keys and bad values are
// refused with a message naming the key. Plain data; any thread after load.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "broker/policy/policy_config.hpp"
#include "common/log/log_options.hpp"
#include "common/protocol/messages.hpp"
#include "common/status.hpp"

namespace kiln::broker {

struct TenantConfig {
  std::string name;
  std::vector<std::string> tokens;
  // Literal secrets masked with *** in everything this tenant's jobs return.
  std::vector<std::string> secrets;
  // Two-level opt-in: without `enabled` every submit answers
  // CODE_EXECUTION_DISABLED; without `auto_approve` every job waits for an
  // admin's approval (awaiting_approval).
  bool enabled = false;
  bool auto_approve = false;
  // The isolation level every job of the tenant runs at ("standard" or
  // "gvisor", broker/job/isolation.hpp): its jobs go only to workers
  // offering that level, never to a weaker (or another) one.
  std::string isolation = "standard";
  // Scheduling overrides; 0 takes the `scheduling` default.
  uint32_t weight = 0;        // share of contended slots (weighted round-robin)
  uint64_t slots = 0;         // jobs running at once
  uint64_t max_queue = 0;     // jobs waiting at once
  uint32_t max_sessions = 0;  // live sessions
  // Client quotas on this broker; 0 takes the `quotas` default.
  uint32_t max_requests = 0;       // API requests being served at once
  uint32_t max_waits = 0;          // wait:true submits waiting at once
  uint32_t max_streams = 0;        // open event streams (SSE)
  uint32_t max_subscriptions = 0;  // open native subscriptions
  uint32_t max_websockets = 0;     // open WebSocket connections (GET /v1/ws)
  uint64_t max_unread_bytes = 0;   // records sent to its clients and not yet read
  double submit_rate = 0;          // submits per second (token bucket); 0: the default
  uint32_t submit_burst = 0;       // bucket size
  // Network on request (docs/api.md, "Network"): the destinations its jobs
  // may ask for (common/network_policy.hpp); empty: no network at all. The
  // caps hold per job (per session execution).
  struct Network {
    std::vector<std::string> allow;
    uint64_t max_bytes = 64u << 20;  // bytes in and out together
    uint64_t max_connections = 64;   // destinations asked for (allowed or not)
  } network;
  // Webhooks (docs/api.md, "Webhooks"): the host:port destinations a job's
  // callback_url may name (as network.allow: common/network_policy.hpp) and
  // the key that signs deliveries (HMAC-SHA256). Empty allow: no callbacks.
  struct Webhooks {
    std::vector<std::string> allow;
    std::string secret;
  } webhooks;
};

// What one tenant may hold on one broker at once (docs/security.md, "Hostile
// clients"); beyond it a request answers 429 RATE_LIMITED with Retry-After.
struct QuotaConfig {
  uint32_t tenant_max_requests = 32;
  uint32_t tenant_max_waits = 1000;
  uint32_t tenant_max_streams = 256;
  uint32_t tenant_max_subscriptions = 1024;
  uint32_t tenant_max_websockets = 64;
  // Bytes of records (GET answers, stream ends, subscription results) sent to
  // a tenant's clients that they have not read yet (UnreadBudget).
  uint64_t tenant_max_unread_bytes = 64u << 20;
  double tenant_submit_rate = 0;     // submits per second per broker; 0: no rate limit
  uint32_t tenant_submit_burst = 0;  // 0: twice the rate (at least 1)
};

// The HTTP front end's connection handling (broker.http).
struct HttpConfig {
  std::string listen = "127.0.0.1:8080";
  uint32_t threads = 16;                // run handlers that call Redis; waits and streams hold none
  uint32_t io_threads = 2;              // read, parse and write every connection
  uint64_t max_body_bytes = 16u << 20;  // request body cap, chunked or not
  uint64_t max_body_buffer_bytes = 256u << 20;  // all bodies being read or handled at once
  uint32_t max_header_bytes = 16u << 10;        // request line + headers
  uint32_t max_connections = 10000;             // open at once; more are refused at accept
  uint32_t max_connections_per_address = 1024;
  uint32_t header_timeout_ms = 10000;   // the whole request head must arrive within this
  uint32_t body_timeout_ms = 60000;     // and the whole body within this
  uint32_t idle_timeout_ms = 60000;     // a kept-alive connection with no request is closed
  uint32_t max_queued_requests = 1024;  // handlers waiting for a thread; more answer 503
  // The WebSocket channel (GET /v1/ws, docs/api.md).
  struct WebSocket {
    uint64_t max_message_bytes = 2u << 20;  // a larger message closes the connection (1009)
    double messages_per_second = 100;       // per connection; more are refused RATE_LIMITED
    uint32_t message_burst = 200;
    uint32_t max_follows = 64;         // executions followed at once on one connection
    uint32_t idle_timeout_ms = 60000;  // pinged at half; closed when nothing came back
  } websocket;
};

// The native client endpoint's connection handling (broker.clients).
struct NativeConfig {
  std::string endpoint = "tcp://127.0.0.1:5556";  // empty: off
  uint32_t max_connections = 4096;
  uint32_t max_connections_per_address = 1024;
  uint32_t auth_timeout_ms = 10000;  // a connection without a valid request by then is closed
  uint32_t write_timeout_ms =
      30000;             // a client holding unread frames, none taken for this long, is closed
  uint32_t threads = 8;  // serve the requests that call Redis
  // CURVE encryption (any client key; tokens authenticate): the broker's
  // secret key file. Empty: plain text, tokens in clear.
  std::string secret_key_file;
};

// Cluster-wide scheduling (every broker should use the same values: they
// meet in Redis).
struct SchedulingConfig {
  uint64_t global_slots = 0;  // jobs running at once in the cluster (0: no limit)
  uint32_t worker_slots = 0;  // per-worker cap below its own slots (0: its own)
  uint64_t tenant_slots = 0;  // per tenant (0: no limit)
  uint32_t tenant_weight = 1;
  uint64_t tenant_max_queue = 10000;  // waiting jobs per tenant; more -> 429 QUEUE_FULL
  uint32_t tenant_max_sessions = 100;
  uint32_t worker_max_sessions = 64;
  uint64_t session_ttl_s = 600;     // idle sessions expire
  uint64_t slot_lease_ms = 15000;   // a dead broker's slots come back after this
  uint32_t pump_interval_ms = 100;  // retry queued jobs this often while any wait
};

// The broker's log subsystems, each with its own level under log.levels
// (docs/operations.md, "Logs").
inline common::LogOptions DefaultLogOptions() {
  common::LogOptions o;
  o.component = "broker";
  o.subsystems = {"http", "scheduler", "jobs", "events", "audit", "native"};
  return o;
}

struct BrokerConfig {
  std::string id;  // default: <hostname>-<pid>
  // HTTP front end.
  HttpConfig http;
  // Worker endpoint (ZeroMQ ROUTER).
  std::string worker_endpoint = "tcp://127.0.0.1:5555";
  uint32_t heartbeat_interval_ms = 1000;
  uint32_t heartbeat_liveness = 3;
  // CURVE on the worker endpoint (docs/security.md, "Worker links"): the
  // broker's secret key file and the directory of accepted <worker-id>.pub
  // files, both or neither. Without them the endpoint must be loopback-only
  // unless worker_allow_unauthenticated says otherwise.
  std::string worker_secret_key_file;
  std::string worker_accepted_keys_dir;
  bool worker_allow_unauthenticated = false;
  // Native client protocol endpoint (ZeroMQ ROUTER, docs/protocol.md).
  NativeConfig native;
  // Redis.
  std::string redis_url = "redis://127.0.0.1:6379";
  uint32_t redis_pool_size = 8;
  uint64_t job_ttl_s = 86400;  // how long records stay readable
  // Jobs.
  common::protocol::Limits default_limits{30000, 256, 30000, 102400, 64};
  common::protocol::Limits max_limits{300000, 2048, 300000, 10u << 20, 256};
  uint64_t max_code_bytes = 1u << 20;
  uint64_t max_input_bytes = 1u << 20;
  uint64_t max_files_bytes = 10u << 20;
  uint64_t wait_grace_ms = 5000;  // wait:true answers after timeout + grace at the latest
  SchedulingConfig scheduling;
  QuotaConfig quotas;
  // Governance.
  PolicyConfig policy;                   // `policy:` (docs/policy.md)
  uint64_t approval_timeout_s = 3600;    // a job awaiting approval longer ends APPROVAL_EXPIRED
  uint64_t audit_max_entries = 1000000;  // the audit stream keeps this many (0: all)
  // Auth.
  std::vector<TenantConfig> tenants;
  std::vector<std::string> admin_tokens;
  // Logging (log.level, log.format, log.levels per subsystem).
  common::LogOptions log = DefaultLogOptions();
};

common::StatusOr<BrokerConfig> LoadBrokerConfig(const std::string& file);

// A tenant's effective limits (its overrides, else the scheduling defaults).
uint32_t TenantWeight(const BrokerConfig& c, const TenantConfig& t);
uint64_t TenantSlots(const BrokerConfig& c, const TenantConfig& t);
uint64_t TenantMaxQueue(const BrokerConfig& c, const TenantConfig& t);
uint32_t TenantMaxSessions(const BrokerConfig& c, const TenantConfig& t);
uint32_t TenantMaxRequests(const BrokerConfig& c, const TenantConfig& t);
uint32_t TenantMaxWaits(const BrokerConfig& c, const TenantConfig& t);
uint32_t TenantMaxStreams(const BrokerConfig& c, const TenantConfig& t);
uint32_t TenantMaxSubscriptions(const BrokerConfig& c, const TenantConfig& t);
uint32_t TenantMaxWebSockets(const BrokerConfig& c, const TenantConfig& t);
uint64_t TenantMaxUnreadBytes(const BrokerConfig& c, const TenantConfig& t);
double TenantSubmitRate(const BrokerConfig& c, const TenantConfig& t);
uint32_t TenantSubmitBurst(const BrokerConfig& c, const TenantConfig& t);
const TenantConfig* FindTenant(const BrokerConfig& c, const std::string& name);

}  // namespace kiln::broker
