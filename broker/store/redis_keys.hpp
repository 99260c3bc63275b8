// Every Redis key, prefix and channel the broker uses, spelled once. The C++
// stores use the constants and helpers below; the Lua scripts get the same
// names from LuaKeyTable() (a table `K` prepended to each script: `K.q ..
// tenant`), and none spells a key itself (redis_keys_test checks). All carry
// the {kiln} hash tag, so multi-key scripts stay in one slot of a cluster.
// What each holds: docs/architecture.md, "Redis keys".
//
//   conn->Command({"HGET", keys::Job(id), "status"});
//
// Constants only: any thread.
#pragma once

#include <string>
#include <string_view>
#include <utility>

namespace kiln::broker::keys {

inline constexpr std::string_view kTag = "{kiln}:";

// Prefixes: the key is the prefix and an id.
inline constexpr const char* kJobPrefix = "{kiln}:job:";                    // + job id: hash
inline constexpr const char* kOutputPrefix = "{kiln}:out:";                 // + job id: stream
inline constexpr const char* kQueuePrefix = "{kiln}:q:";                    // + tenant: zset
inline constexpr const char* kSessionQueuePrefix = "{kiln}:sq:";            // + session key: list
inline constexpr const char* kSessionPrefix = "{kiln}:session:";            // + session key: hash
inline constexpr const char* kTenantSessionsPrefix = "{kiln}:sessions:t:";  // + tenant: zset
inline constexpr const char* kWorkerSessionsPrefix = "{kiln}:sessions:w:";  // + worker: set
inline constexpr const char* kTenantLeasesPrefix = "{kiln}:lease:t:";       // + tenant: zset
inline constexpr const char* kWorkerLeasesPrefix = "{kiln}:lease:w:";       // + worker: zset
inline constexpr const char* kInFlightPrefix = "{kiln}:inflight:";          // + broker id: hash
inline constexpr const char* kIdempotencyPrefix = "{kiln}:idem:";   // + tenant:key: string (job id)
inline constexpr const char* kTenantJobsPrefix = "{kiln}:jobs:t:";  // + tenant: stream
inline constexpr const char* kUsagePrefix = "{kiln}:usage:";        // + tenant:YYYY-MM-DD: hash
inline constexpr const char* kToolsPrefix = "{kiln}:tools:";        // + job id: hash (tool calls)

// Whole keys.
inline constexpr const char* kGlobalLeases = "{kiln}:lease:global";   // zset
inline constexpr const char* kBrokers = "{kiln}:brokers";             // zset
inline constexpr const char* kApprovals = "{kiln}:approvals";         // zset
inline constexpr const char* kActiveTenants = "{kiln}:active";        // zset
inline constexpr const char* kVirtualTime = "{kiln}:vtime";           // string: fair-share clock
inline constexpr const char* kTenants = "{kiln}:tenants";             // hash
inline constexpr const char* kSequence = "{kiln}:seq";                // counter
inline constexpr const char* kSessionEpochs = "{kiln}:epoch";         // counter
inline constexpr const char* kEvents = "{kiln}:events";               // pub/sub channel
inline constexpr const char* kAudit = "{kiln}:audit";                 // stream
inline constexpr const char* kAuditHead = "{kiln}:audit:head";        // string
inline constexpr const char* kAuditAnchor = "{kiln}:audit:anchor";    // string
inline constexpr const char* kAuditPending = "{kiln}:audit:pending";  // zset
inline constexpr const char* kWebhooks = "{kiln}:webhooks";  // zset: job id -> next try (ms)
inline constexpr const char* kWebhookAttempts = "{kiln}:webhooks:attempts";  // hash: job id -> n
inline constexpr const char* kWebhooksDead = "{kiln}:webhooks:dead";         // list: given up

// The Lua name of each, for LuaKeyTable().
inline constexpr std::pair<const char*, const char*> kLuaNames[] = {
    {"job", kJobPrefix},
    {"out", kOutputPrefix},
    {"q", kQueuePrefix},
    {"sq", kSessionQueuePrefix},
    {"session", kSessionPrefix},
    {"sessions_t", kTenantSessionsPrefix},
    {"sessions_w", kWorkerSessionsPrefix},
    {"lease_t", kTenantLeasesPrefix},
    {"lease_w", kWorkerLeasesPrefix},
    {"inflight", kInFlightPrefix},
    {"idem", kIdempotencyPrefix},
    {"jobs_t", kTenantJobsPrefix},
    {"usage", kUsagePrefix},
    {"tools", kToolsPrefix},
    {"lease_global", kGlobalLeases},
    {"brokers", kBrokers},
    {"approvals", kApprovals},
    {"active", kActiveTenants},
    {"vtime", kVirtualTime},
    {"tenants", kTenants},
    {"seq", kSequence},
    {"epoch", kSessionEpochs},
    {"events", kEvents},
    {"audit", kAudit},
    {"audit_head", kAuditHead},
    {"audit_anchor", kAuditAnchor},
    {"audit_pending", kAuditPending},
    {"webhooks", kWebhooks},
    {"webhook_attempts", kWebhookAttempts},
    {"webhooks_dead", kWebhooksDead},
};

inline std::string Job(std::string_view id) { return std::string(kJobPrefix).append(id); }
inline std::string Output(std::string_view id) { return std::string(kOutputPrefix).append(id); }
inline std::string Tools(std::string_view id) { return std::string(kToolsPrefix).append(id); }
inline std::string TenantJobs(std::string_view tenant) {
  return std::string(kTenantJobsPrefix).append(tenant);
}
inline std::string Usage(std::string_view tenant, std::string_view date) {
  return std::string(kUsagePrefix).append(tenant).append(":").append(date);
}

// "local K = {job = '{kiln}:job:', ...}\n": the first line of every script.
inline std::string LuaKeyTable() {
  std::string t = "local K = {";
  bool first = true;
  for (const auto& [name, key] : kLuaNames) {
    if (!first) t += ", ";
    first = false;
    t.append(name).append(" = '").append(key).append("'");
  }
  return t + "}\n";
}

}  // namespace kiln::broker::keys
