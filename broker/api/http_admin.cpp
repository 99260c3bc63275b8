// The routes of HttpApi that serve operators and the cluster's state:
// approvals, the audit trail, capabilities, usage, workers, health and metrics
// (HttpApi's handlers; the execution routes are in http_api.cpp).
#include <charconv>

#include "broker/api/http_api.hpp"
#include "broker/api/http_call.hpp"
#include "broker/job/isolation.hpp"
#include "broker/job/limits_json.hpp"
#include "broker/metrics/broker_metrics.hpp"
#include "broker/scheduler/runtime_catalog.hpp"
#include "broker/store/usage_days.hpp"
#include "broker/tools/tool_spec.hpp"
#include "common/clock.hpp"
#include "common/json/bounded_json.hpp"

namespace kiln::broker {
namespace {

using common::Code;
using common::Status;
using nlohmann::json;

// How long GET /v1/health waits for Redis to answer a PING.
constexpr auto kHealthWait = std::chrono::milliseconds(500);

}  // namespace

void HttpApi::Approve(Call& call) {
  bool trust = false;
  const std::string body_text = call.ex->TakeBody();
  if (!body_text.empty()) {
    auto body = common::ParseJson(body_text, {}, "request body");
    if (!body.ok()) return call.Fail(body.status());
    if (!body->is_object()) return call.Fail(common::InvalidRequest("body must be a JSON object"));
    for (const auto& [key, value] : body->items()) {
      if (key != "trust_session") {
        return call.Fail(common::InvalidRequest("unknown field '" + key + "'"));
      }
      if (!value.is_boolean()) {
        return call.Fail(common::InvalidRequest("trust_session: expected true or false"));
      }
      trust = value.get<bool>();
    }
  }
  const std::string& id = call.params.at(0);
  auto status = service_->Approve(call.caller, id, trust);
  if (!status.ok()) return call.Fail(status.status());
  // Its session went away meanwhile: it ended cancelled, nothing to trust.
  if (*status == "cancelled") return call.Reply(200, {{"id", id}, {"status", *status}});
  call.Reply(200, {{"id", id}, {"status", *status}, {"trust_session", trust}});
}

void HttpApi::Deny(Call& call) {
  auto record = service_->Deny(call.caller, call.params.at(0));
  if (!record.ok()) return call.Fail(record.status());
  call.Reply(200, record->ToJson());
}

void HttpApi::ListApprovals(Call& call) {
  auto pending = service_->PendingApprovals(500);
  if (!pending.ok()) return call.Fail(pending.status());
  json list = json::array();
  for (const auto& p : *pending) {
    const JobSpec& spec = p.spec;
    list.push_back({{"id", p.id},
                    {"tenant", spec.tenant},
                    {"language", spec.language},
                    {"session_id", spec.session_id.empty() ? json(nullptr) : json(spec.session_id)},
                    {"code", spec.code},
                    {"warnings", spec.warnings},
                    {"created_at", spec.created_ms},
                    {"expires_at", p.expires_ms}});
  }
  call.Reply(200, {{"approvals", list}});
}

void HttpApi::ReadAudit(Call& call) {
  size_t count = 500;
  if (call.req().query.count("count")) {
    const std::string c = call.req().Param("count");
    auto [p, ec] = std::from_chars(c.data(), c.data() + c.size(), count);
    if (ec != std::errc() || p != c.data() + c.size() || count == 0 || count > 10000) {
      return call.Fail(common::InvalidRequest("count: 1-10000"));
    }
  }
  auto page = service_->ReadAudit(call.req().Param("after"), count);
  if (!page.ok()) return call.Fail(page.status());
  json entries = json::array();
  for (const auto& e : page->entries) entries.push_back(e.ToExportJson());
  call.Reply(200,
             {{"entries", entries},
              {"anchor", page->anchor},
              {"head", page->head},
              {"next", page->entries.empty() ? json(nullptr) : json(page->entries.back().id)}});
}

void HttpApi::VerifyAudit(Call& call) {
  auto report = service_->VerifyAudit();
  if (!report.ok()) return call.Fail(report.status());
  json body = {{"ok", !report->broken}, {"checked", report->checked}, {"broken", nullptr}};
  if (report->broken) {
    body["broken"] = {{"index", report->broken->index},
                      {"id", report->broken->id},
                      {"reason", report->broken->reason}};
  }
  call.Reply(200, body);
}

json HttpApi::RuntimesOffered(const Caller& caller) const {
  const TenantConfig* t = caller.admin ? nullptr : FindTenant(config_, caller.tenant);
  const auto views = deps_.dispatcher->Workers();
  std::vector<OfferedRuntimes> offered;
  for (const auto& w : views) {
    if (t == nullptr || w.isolation == NormalizeIsolation(t->isolation)) {
      offered.push_back({&w.runtimes, w.catalog.get()});
    }
  }
  return RuntimesJson(offered);
}

void HttpApi::Runtimes(Call& call) { call.Reply(200, RuntimesOffered(call.caller)); }

void HttpApi::Capabilities(Call& call) {
  const TenantConfig* t = call.caller.admin ? nullptr : FindTenant(config_, call.caller.tenant);
  // The names of the packages every worker offers, per language (for tool
  // descriptions; GET /v1/runtimes has the versions).
  json packages = json::object();
  const json offered = RuntimesOffered(call.caller);
  for (const auto& r : offered["runtimes"]) {
    json names = json::array();
    for (const auto& p : r["packages"]) names.push_back(p["name"]);
    packages[r["language"].get<std::string>()] = std::move(names);
  }
  // Network on request: what the tenant's jobs may ask for (null: nothing).
  json network = nullptr;
  if (t != nullptr && !t->network.allow.empty()) {
    network = {{"allow", t->network.allow},
               {"max_bytes", t->network.max_bytes},
               {"max_connections", t->network.max_connections}};
  }
  call.Reply(200, {{"tenant", t ? json(t->name) : json(nullptr)},
                   {"code_execution", t != nullptr && t->enabled},
                   {"auto_approve", t != nullptr && t->auto_approve},
                   {"isolation", t ? json(t->isolation) : json(nullptr)},
                   // What this tenant's jobs can run on: its own level's workers.
                   {"runtimes",
                    t ? deps_.dispatcher->RuntimesAt(t->isolation) : deps_.dispatcher->Runtimes()},
                   {"isolation_levels", deps_.dispatcher->IsolationLevels()},
                   {"packages", std::move(packages)},
                   {"network", std::move(network)},
                   // What a job may ask for, so clients can say so up front
                   // (the MCP server's tool description).
                   {"limits",
                    {{"default", LimitsJson(config_.default_limits)},
                     {"max", LimitsJson(config_.max_limits)},
                     {"max_code_bytes", config_.max_code_bytes},
                     {"max_input_bytes", config_.max_input_bytes},
                     {"max_files_bytes", config_.max_files_bytes},
                     {"tools",
                      {{"max_tools", kMaxTools},
                       {"max_calls", kMaxToolCalls},
                       {"max_in_flight", kMaxToolsInFlight},
                       {"max_argument_bytes", kMaxToolArgumentBytes},
                       {"max_result_bytes", kMaxToolResultBytes},
                       {"max_error_bytes", kMaxToolErrorBytes},
                       {"max_schema_bytes", kMaxToolSchemaBytes},
                       {"default_timeout_ms", kDefaultToolTimeoutMs},
                       {"max_timeout_ms", kMaxToolTimeoutMs}}}}},
                   {"session_ttl_s", config_.scheduling.session_ttl_s}});
}

void HttpApi::Usage(Call& call) {
  const HttpRequest& req = call.req();
  // Days [from, to] in UTC; by default the 30 days up to today.
  int64_t to = UtcDayOf(common::NowMs());
  if (req.query.count("to")) {
    auto day = ParseUtcDate(req.Param("to"), "to");
    if (!day.ok()) return call.Fail(day.status());
    to = *day;
  }
  int64_t from = to - 29;
  if (req.query.count("from")) {
    auto day = ParseUtcDate(req.Param("from"), "from");
    if (!day.ok()) return call.Fail(day.status());
    from = *day;
  }
  if (from > to) return call.Fail(common::InvalidRequest("from: after `to`"));
  if (to - from >= 366) return call.Fail(common::InvalidRequest("from: at most 366 days at once"));
  auto usage = service_->Usage(call.caller, req.Param("tenant"), from, to);
  if (!usage.ok()) return call.Fail(usage.status());
  json tenants = json::array();
  for (const auto& t : *usage) {
    json days = json::array();
    uint64_t executions = 0;
    uint64_t cpu_us = 0;
    uint64_t output_bytes = 0;
    for (const auto& d : t.days) {
      days.push_back({{"date", UtcDateOf(d.day)},
                      {"executions", d.executions},
                      {"cpu_seconds", static_cast<double>(d.cpu_us) / 1e6},
                      {"output_bytes", d.output_bytes}});
      executions += d.executions;
      cpu_us += d.cpu_us;
      output_bytes += d.output_bytes;
    }
    tenants.push_back({{"tenant", t.tenant},
                       {"days", std::move(days)},
                       {"total",
                        {{"executions", executions},
                         {"cpu_seconds", static_cast<double>(cpu_us) / 1e6},
                         {"output_bytes", output_bytes}}}});
  }
  call.Reply(200, {{"from", UtcDateOf(from)}, {"to", UtcDateOf(to)}, {"tenants", tenants}});
}

void HttpApi::ListWorkers(Call& call) {
  json workers = json::array();
  for (const auto& w : deps_.dispatcher->Workers()) {
    workers.push_back({{"id", w.id},
                       {"hostname", w.hostname},
                       {"runtimes", w.runtimes},
                       {"sandbox_layers", w.sandbox_layers},
                       {"isolation", w.isolation},
                       {"slots", w.slots},
                       {"running", w.running},
                       {"load", w.slots ? static_cast<double>(w.running) / w.slots : 0.0},
                       {"draining", w.draining},
                       {"registered_at_ms", w.registered_at_ms},
                       {"last_heartbeat_ms", w.last_heartbeat_ms},
                       {"metrics_endpoint", w.metrics_endpoint}});
  }
  call.Reply(200, {{"workers", workers}});
}

void HttpApi::Metrics(Call& call) {
  if (!deps_.metrics) return call.Fail(common::NotFound("metrics are off"));
  deps_.metrics->SetHttpFront(server_->connections(), server_->reserve_connections(),
                              waits_.total(), streams_.total(),
                              deps_.follower ? deps_.follower->size() : 0);
  call.ex->Reply(HttpResponse{200, deps_.metrics->Render(), "text/plain; version=0.0.4", {}});
}

void HttpApi::Health(Call& call) {
  // Never a Redis call on this thread: the probe pings (one PING for every
  // health request waiting), and a PING slower than kHealthWait is an answer
  // too — health answers within it while Redis stalls.
  auto answer = [this, ex = call.ex](const RedisProbe::State& redis) {
    json body = {
        {"status", redis.ok ? "ok" : "unavailable"},
        {"redis", redis.ok ? "ok" : redis.error},
        {"workers", deps_.dispatcher->Workers().size()},
        {"queued", deps_.dispatcher->QueueDepth()}};      // every tenant's, as of the last tick
    ex->Reply(JsonResponse(redis.ok ? 200 : 503, body));  // the first answer wins
  };
  if (!deps_.probe) return answer(RedisProbe::State{true});
  deps_.probe->Fresh(answer);
  server_->After(kHealthWait, [answer] {
    RedisProbe::State late;
    late.error = "redis: no answer to PING within " + std::to_string(kHealthWait.count()) + " ms";
    answer(late);
  });
}

}  // namespace kiln::broker
