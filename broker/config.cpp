#include "broker/config.hpp"

#include <unistd.h>

#include <set>

#include "broker/job/isolation.hpp"
#include "common/config/yaml_reader.hpp"
#include "common/network_policy.hpp"

namespace kiln::broker {
namespace {

using common::YamlReader;

void ReadLimits(YamlReader r, common::protocol::Limits* l, common::Status* st) {
  r.Get("timeout_ms", &l->timeout_ms, 1, 24ull * 3600 * 1000);
  r.Get("memory_mb", &l->memory_mb, 16, 1u << 20);
  r.Get("cpu_ms", &l->cpu_ms, 1, 24ull * 3600 * 1000);
  r.Get("max_output_bytes", &l->max_output_bytes, 1, common::protocol::kMaxStreamBytes);
  r.Get("max_pids", &l->max_pids, 1, 1u << 16);
  if (st->ok()) *st = r.Finish();
}

}  // namespace

common::StatusOr<BrokerConfig> LoadBrokerConfig(const std::string& file) {
  ASSIGN_OR_RETURN(YAML::Node root, common::LoadYamlFile(file));
  BrokerConfig c;
  common::Status st;
  YamlReader top(root, "");

  YamlReader b = top.Child("broker");
  b.Get("id", &c.id);
  b.Get("job_ttl_s", &c.job_ttl_s, 60, 365ull * 86400);
  b.Get("wait_grace_ms", &c.wait_grace_ms, 0, 600'000);
  YamlReader http = b.Child("http");
  auto& h = c.http;
  http.Get("listen", &h.listen);
  http.Get("threads", &h.threads, 1, 4096);
  http.Get("io_threads", &h.io_threads, 1, 64);
  http.Get("max_body_bytes", &h.max_body_bytes, 1024, 256u << 20);
  http.Get("max_body_buffer_bytes", &h.max_body_buffer_bytes, 1024, 64ull << 30);
  http.Get("max_header_bytes", &h.max_header_bytes, 1024, 1u << 20);
  http.Get("max_connections", &h.max_connections, 1, 1'000'000);
  http.Get("max_connections_per_address", &h.max_connections_per_address, 1, 1'000'000);
  http.Get("header_timeout_ms", &h.header_timeout_ms, 100, 600'000);
  http.Get("body_timeout_ms", &h.body_timeout_ms, 100, 3'600'000);
  http.Get("idle_timeout_ms", &h.idle_timeout_ms, 100, 3'600'000);
  http.Get("max_queued_requests", &h.max_queued_requests, 1, 1'000'000);
  {
    YamlReader ws = http.Child("websocket");
    auto& w = h.websocket;
    // Large enough for the largest tool answer (1 MiB of JSON) and its envelope.
    ws.Get("max_message_bytes", &w.max_message_bytes, 4096, 64u << 20);
    ws.Get("messages_per_second", &w.messages_per_second, 0.1, 1e6);
    ws.Get("message_burst", &w.message_burst, 1, 1'000'000);
    ws.Get("max_follows", &w.max_follows, 1, 100'000);
    ws.Get("idle_timeout_ms", &w.idle_timeout_ms, 1000, 3'600'000);
    if (st.ok()) st = ws.Finish();
  }
  YamlReader workers = b.Child("workers");
  workers.Get("endpoint", &c.worker_endpoint);
  workers.Get("heartbeat_interval_ms", &c.heartbeat_interval_ms, 50, 60'000);
  workers.Get("heartbeat_liveness", &c.heartbeat_liveness, 1, 100);
  workers.Get("secret_key_file", &c.worker_secret_key_file);
  workers.Get("accepted_keys_dir", &c.worker_accepted_keys_dir);
  workers.Get("allow_unauthenticated", &c.worker_allow_unauthenticated);
  YamlReader clients = b.Child("clients");
  clients.Get("endpoint", &c.native.endpoint);
  clients.Get("max_connections", &c.native.max_connections, 1, 1'000'000);
  clients.Get("max_connections_per_address", &c.native.max_connections_per_address, 1, 1'000'000);
  clients.Get("auth_timeout_ms", &c.native.auth_timeout_ms, 100, 600'000);
  clients.Get("write_timeout_ms", &c.native.write_timeout_ms, 100, 3'600'000);
  clients.Get("threads", &c.native.threads, 1, 256);
  clients.Get("secret_key_file", &c.native.secret_key_file);
  YamlReader redis = b.Child("redis");
  redis.Get("url", &c.redis_url);
  redis.Get("pool_size", &c.redis_pool_size, 1, 1024);
  for (auto* r : {&http, &workers, &clients, &redis}) {
    if (st.ok()) st = r->Finish();
  }
  if (st.ok()) st = b.Finish();

  YamlReader limits = top.Child("limits");
  ReadLimits(limits.Child("default"), &c.default_limits, &st);
  ReadLimits(limits.Child("max"), &c.max_limits, &st);
  limits.Get("max_code_bytes", &c.max_code_bytes, 1, common::protocol::kMaxCodeBytes);
  limits.Get("max_input_bytes", &c.max_input_bytes, 2, common::protocol::kMaxInputJsonBytes);
  limits.Get("max_files_bytes", &c.max_files_bytes, 0, common::protocol::kMaxFilesBytes);
  if (st.ok()) st = limits.Finish();

  YamlReader sc = top.Child("scheduling");
  auto& g = c.scheduling;
  sc.Get("global_slots", &g.global_slots, 0, 1'000'000);
  sc.Get("worker_slots", &g.worker_slots, 0, 100'000);
  sc.Get("tenant_slots", &g.tenant_slots, 0, 1'000'000);
  sc.Get("tenant_weight", &g.tenant_weight, 1, 1000);
  sc.Get("tenant_max_queue", &g.tenant_max_queue, 1, 10'000'000);
  sc.Get("tenant_max_sessions", &g.tenant_max_sessions, 1, 1'000'000);
  sc.Get("worker_max_sessions", &g.worker_max_sessions, 1, 100'000);
  sc.Get("session_ttl_s", &g.session_ttl_s, 1, 30ull * 86400);
  sc.Get("slot_lease_ms", &g.slot_lease_ms, 1000, 3'600'000);
  sc.Get("pump_interval_ms", &g.pump_interval_ms, 5, 10'000);
  if (st.ok()) st = sc.Finish();

  YamlReader qr = top.Child("quotas");
  auto& q = c.quotas;
  qr.Get("tenant_max_requests", &q.tenant_max_requests, 1, 1'000'000);
  qr.Get("tenant_max_waits", &q.tenant_max_waits, 1, 10'000'000);
  qr.Get("tenant_max_streams", &q.tenant_max_streams, 1, 10'000'000);
  qr.Get("tenant_max_subscriptions", &q.tenant_max_subscriptions, 1, 10'000'000);
  qr.Get("tenant_max_websockets", &q.tenant_max_websockets, 1, 10'000'000);
  qr.Get("tenant_max_unread_bytes", &q.tenant_max_unread_bytes, 1u << 20, 1ull << 40);
  qr.Get("tenant_submit_rate", &q.tenant_submit_rate, 0.0, 1e9);
  qr.Get("tenant_submit_burst", &q.tenant_submit_burst, 0, 1'000'000'000);
  if (st.ok()) st = qr.Finish();

  std::set<std::string> seen_tokens;
  YAML::Node tenants = top.Sequence("tenants");
  for (size_t i = 0; tenants && i < tenants.size() && st.ok(); ++i) {
    YamlReader t(tenants[i], "tenants[" + std::to_string(i) + "]");
    TenantConfig tc;
    t.Get("name", &tc.name);
    t.Get("tokens", &tc.tokens);
    t.Get("secrets", &tc.secrets);
    t.Get("enabled", &tc.enabled);
    t.Get("auto_approve", &tc.auto_approve);
    t.Get("isolation", &tc.isolation);
    t.Get("weight", &tc.weight, 0, 1000);
    t.Get("slots", &tc.slots, 0, 1'000'000);
    t.Get("max_queue", &tc.max_queue, 0, 10'000'000);
    t.Get("max_sessions", &tc.max_sessions, 0, 1'000'000);
    t.Get("max_requests", &tc.max_requests, 0, 1'000'000);
    t.Get("max_waits", &tc.max_waits, 0, 10'000'000);
    t.Get("max_streams", &tc.max_streams, 0, 10'000'000);
    t.Get("max_subscriptions", &tc.max_subscriptions, 0, 10'000'000);
    t.Get("max_websockets", &tc.max_websockets, 0, 10'000'000);
    t.Get("max_unread_bytes", &tc.max_unread_bytes, 0, 1ull << 40);
    t.Get("submit_rate", &tc.submit_rate, 0.0, 1e9);
    t.Get("submit_burst", &tc.submit_burst, 0, 1'000'000'000);
    {
      YamlReader n = t.Child("network");
      n.Get("allow", &tc.network.allow);
      n.Get("max_bytes", &tc.network.max_bytes, 1, 1ull << 40);
      n.Get("max_connections", &tc.network.max_connections, 1, 100'000);
      if (common::Status nst = n.Finish(); !nst.ok()) t.Fail("network", nst.message());
      if (auto allow = common::ParseDestinations(tc.network.allow, "allow"); !allow.ok()) {
        t.Fail("network", "tenant '" + tc.name + "': " + allow.status().message());
      }
    }
    {
      YamlReader w = t.Child("webhooks");
      w.Get("allow", &tc.webhooks.allow);
      w.Get("secret", &tc.webhooks.secret);
      if (common::Status wst = w.Finish(); !wst.ok()) t.Fail("webhooks", wst.message());
      if (auto allow = common::ParseDestinations(tc.webhooks.allow, "allow"); !allow.ok()) {
        t.Fail("webhooks", "tenant '" + tc.name + "': " + allow.status().message());
      }
      // A short key is guessable; deliveries without one could be forged.
      if (!tc.webhooks.allow.empty() && tc.webhooks.secret.size() < 16) {
        t.Fail("webhooks", "tenant '" + tc.name + "': a secret of at least 16 bytes signs them");
      }
    }
    if (tc.secrets.size() > common::protocol::kMaxListEntries) {
      t.Fail("secrets", "at most 64 secrets per tenant");
    }
    for (const auto& s : tc.secrets) {
      // Short strings would mask ordinary output; long ones exceed the wire limit.
      if (s.size() < 4 || s.size() > 4096) t.Fail("secrets", "each secret needs 4-4096 bytes");
    }
    if (!IsIsolationLevel(tc.isolation)) {
      t.Fail("isolation", "tenant '" + tc.name + "': unknown isolation level '" + tc.isolation +
                              "' (expected standard or gvisor)");
    }
    if (tc.name.empty()) t.Fail("name", "required");
    // Tenant names become Redis key parts and metric labels.
    if (tc.name.size() > 64 ||
        tc.name.find_first_not_of(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") !=
            std::string::npos) {
      t.Fail("name", "at most 64 letters, digits, '_', '-' and '.'");
    }
    if (FindTenant(c, tc.name) != nullptr) t.Fail("name", "tenant named twice");
    if (tc.tokens.empty()) t.Fail("tokens", "at least one token is required");
    for (const auto& tok : tc.tokens) {
      if (tok.size() < 8) t.Fail("tokens", "tokens must be at least 8 characters");
      if (!seen_tokens.insert(tok).second) t.Fail("tokens", "token used twice");
    }
    st = t.Finish();
    c.tenants.push_back(std::move(tc));
  }
  top.Get("admin_tokens", &c.admin_tokens);
  for (const auto& tok : c.admin_tokens) {
    if (tok.size() < 8) top.Fail("admin_tokens", "tokens must be at least 8 characters");
    if (!seen_tokens.insert(tok).second) top.Fail("admin_tokens", "token used twice");
  }

  YamlReader approval = top.Child("approval");
  approval.Get("timeout_s", &c.approval_timeout_s, 10, 30ull * 86400);
  if (st.ok()) st = approval.Finish();
  YamlReader audit = top.Child("audit");
  audit.Get("max_entries", &c.audit_max_entries, 0, 1'000'000'000);
  if (st.ok()) st = audit.Finish();
  if (st.ok()) {
    auto policy = ParsePolicyConfig(top.Raw("policy"), "policy");
    if (policy.ok()) {
      c.policy = std::move(*policy);
    } else {
      st = policy.status();
    }
  }

  YamlReader log = top.Child("log");
  log.GetEnum("level", &c.log.level,
              {"trace", "debug", "info", "warn", "error", "critical", "off"});
  log.GetEnum("format", &c.log.format, {"text", "json"});
  log.Get("levels", &c.log.levels);
  if (st.ok()) st = log.Finish();
  if (st.ok()) st = common::ValidateLogOptions(c.log);
  if (st.ok()) st = top.Finish();
  if (!st.ok()) return st.WithContext(file);

  auto over = [&](uint64_t d, uint64_t m, const char* name) -> common::Status {
    if (d > m) {
      return common::InvalidRequest(file + ": limits.default." + name + " is above limits.max." +
                                    name);
    }
    return common::Status::Ok();
  };
  const auto& d = c.default_limits;
  const auto& m = c.max_limits;
  RETURN_IF_ERROR(over(d.timeout_ms, m.timeout_ms, "timeout_ms"));
  RETURN_IF_ERROR(over(d.memory_mb, m.memory_mb, "memory_mb"));
  RETURN_IF_ERROR(over(d.cpu_ms, m.cpu_ms, "cpu_ms"));
  RETURN_IF_ERROR(over(d.max_output_bytes, m.max_output_bytes, "max_output_bytes"));
  RETURN_IF_ERROR(over(d.max_pids, m.max_pids, "max_pids"));
  // A dead broker's leases must outlive the time another broker needs to
  // notice (liveness) and take its jobs over (a tick or two).
  const uint64_t takeover_ms =
      static_cast<uint64_t>(c.heartbeat_interval_ms) * (c.heartbeat_liveness + 2);
  if (c.scheduling.slot_lease_ms < takeover_ms) {
    return common::InvalidRequest(file + ": scheduling.slot_lease_ms must be at least " +
                                  std::to_string(takeover_ms) +
                                  " (heartbeat_interval_ms x (heartbeat_liveness + 2))");
  }
  if (c.tenants.empty()) {
    return common::InvalidRequest(file + ": tenants: at least one tenant is required");
  }
  if (c.worker_secret_key_file.empty() != c.worker_accepted_keys_dir.empty()) {
    return common::InvalidRequest(
        file + ": broker.workers.secret_key_file and accepted_keys_dir go together");
  }
  if (c.id.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    c.id = std::string(host) + "-" + std::to_string(::getpid());
  }
  return c;
}

uint32_t TenantWeight(const BrokerConfig& c, const TenantConfig& t) {
  return t.weight ? t.weight : c.scheduling.tenant_weight;
}
uint64_t TenantSlots(const BrokerConfig& c, const TenantConfig& t) {
  return t.slots ? t.slots : c.scheduling.tenant_slots;
}
uint64_t TenantMaxQueue(const BrokerConfig& c, const TenantConfig& t) {
  return t.max_queue ? t.max_queue : c.scheduling.tenant_max_queue;
}
uint32_t TenantMaxSessions(const BrokerConfig& c, const TenantConfig& t) {
  return t.max_sessions ? t.max_sessions : c.scheduling.tenant_max_sessions;
}
uint32_t TenantMaxRequests(const BrokerConfig& c, const TenantConfig& t) {
  return t.max_requests ? t.max_requests : c.quotas.tenant_max_requests;
}
uint32_t TenantMaxWaits(const BrokerConfig& c, const TenantConfig& t) {
  return t.max_waits ? t.max_waits : c.quotas.tenant_max_waits;
}
uint32_t TenantMaxStreams(const BrokerConfig& c, const TenantConfig& t) {
  return t.max_streams ? t.max_streams : c.quotas.tenant_max_streams;
}
uint32_t TenantMaxSubscriptions(const BrokerConfig& c, const TenantConfig& t) {
  return t.max_subscriptions ? t.max_subscriptions : c.quotas.tenant_max_subscriptions;
}
uint32_t TenantMaxWebSockets(const BrokerConfig& c, const TenantConfig& t) {
  return t.max_websockets ? t.max_websockets : c.quotas.tenant_max_websockets;
}
uint64_t TenantMaxUnreadBytes(const BrokerConfig& c, const TenantConfig& t) {
  return t.max_unread_bytes ? t.max_unread_bytes : c.quotas.tenant_max_unread_bytes;
}
double TenantSubmitRate(const BrokerConfig& c, const TenantConfig& t) {
  return t.submit_rate > 0 ? t.submit_rate : c.quotas.tenant_submit_rate;
}
uint32_t TenantSubmitBurst(const BrokerConfig& c, const TenantConfig& t) {
  if (t.submit_burst) return t.submit_burst;
  if (c.quotas.tenant_submit_burst) return c.quotas.tenant_submit_burst;
  const double rate = TenantSubmitRate(c, t);
  return rate * 2 < 1 ? 1 : static_cast<uint32_t>(rate * 2);
}
const TenantConfig* FindTenant(const BrokerConfig& c, const std::string& name) {
  for (const auto& t : c.tenants) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

}  // namespace kiln::broker
