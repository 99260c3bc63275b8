#include "broker/api/http_api.hpp"

#include <algorithm>
#include <charconv>

#include "broker/api/event_stream.hpp"
#include "broker/api/http_call.hpp"
#include "broker/api/sse_events.hpp"
#include "broker/api/ws_session.hpp"
#include "broker/metrics/broker_metrics.hpp"
#include "broker/service/submit_request.hpp"
#include "broker/tools/tool_relay.hpp"
#include "common/log/logging.hpp"
#include "common/protocol/session_key.hpp"

namespace kiln::broker {
namespace {

const common::SubsystemLog kLog("http");

using common::Code;
using common::Status;
using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

// Jobs one POST /v1/executions/batch may carry.
constexpr size_t kMaxBatchItems = 100;

// How long a cancel request waits for the job to end before answering 202.
constexpr auto kCancelWait = std::chrono::seconds(5);
// A waiting request re-reads the record this often (then doubling, up to
// kRecheckMax), in case the notice of its end was lost.
constexpr auto kRecheckFirst = std::chrono::milliseconds(1000);
constexpr auto kRecheckMax = std::chrono::milliseconds(8000);
// A finished job's record up to this size (output and result) is answered on
// the thread that learnt of the end.
constexpr size_t kInlineAnswerBytes = 64u << 10;

}  // namespace

// One request waiting for a job's end: answered once, by whichever comes
// first — the JobWaiters notice, a re-read that finds it ended, the
// deadline — or dropped when the client leaves.
struct HttpApi::Waiting {
  HttpApi* api;
  std::shared_ptr<HttpExchange> ex;
  std::string id;
  SteadyClock::time_point deadline;
  QuotaCounter::Hold hold;
  bool cancel = false;  // a cancel: 202 when still running at the deadline
  HttpHeaders headers;  // on the answer (Idempotent-Replay)
  std::mutex mu;
  JobWaiters::Handle watch;  // guarded by mu
  bool done = false;         // guarded by mu
  std::chrono::milliseconds backoff = kRecheckFirst;

  // True for the one caller that may answer.
  bool Claim() {
    JobWaiters::Handle w;
    QuotaCounter::Hold h;
    {
      std::lock_guard lock(mu);
      if (done) return false;
      done = true;
      w = std::move(watch);
      h = std::move(hold);
    }
    if (w) api->deps_.waiters->Unwatch(w);
    return true;
  }
  bool finished() {
    std::lock_guard lock(mu);
    return done;
  }
  // The answer for a record (terminal, or current at the deadline);
  // `json`: the record already serialized (DumpJson), if it was.
  void Answer(const JobRecord& r, const std::string* json = nullptr) {
    if (!cancel || IsTerminal(r.status)) {
      // A wait's answer cannot be refused any more: charged all the same,
      // so the tenant's later GETs see it.
      HttpResponse res = json ? HttpResponse{200, *json, "application/json", headers}
                              : JsonResponse(200, r.ToJson(), headers);
      res.keep = api->deps_.unread->Force(r.tenant, r.ApproxJsonBytes());
      ex->Reply(std::move(res));
    } else {
      // Still ending (the worker has not confirmed yet): the record will say.
      ex->Reply(JsonResponse(202, {{"id", r.id}, {"status", JobStatusName(r.status)}}, headers));
    }
  }
};

common::StatusOr<std::unique_ptr<HttpApi>> HttpApi::Create(const BrokerConfig& config,
                                                           HttpApiDeps deps) {
  std::unique_ptr<HttpApi> api(new HttpApi(config, deps));
  HttpServerOptions o;
  const auto& h = config.http;
  o.listen = h.listen;
  o.io_threads = h.io_threads;
  o.max_body_bytes = h.max_body_bytes;
  o.max_body_buffer_bytes = std::max(h.max_body_buffer_bytes, h.max_body_bytes);
  o.max_header_bytes = h.max_header_bytes;
  o.connections.max_total = h.max_connections;
  o.connections.max_per_address = h.max_connections_per_address;
  o.header_timeout = std::chrono::milliseconds(h.header_timeout_ms);
  o.body_timeout = std::chrono::milliseconds(h.body_timeout_ms);
  o.idle_timeout = std::chrono::milliseconds(h.idle_timeout_ms);
  HttpApi* self = api.get();
  ASSIGN_OR_RETURN(api->server_,
                   HttpServer::Create(
                       o, [self](std::shared_ptr<HttpExchange> ex) { self->Handle(std::move(ex)); },
                       ErrorResponse,
                       [self](const HttpRequest* req, int status, size_t bytes) {
                         self->Observe(req, status, bytes);
                       }));
  api->pool_ = std::make_unique<WorkPool>(h.threads, h.max_queued_requests, "kiln-http-work");
  return api;
}

std::vector<std::pair<RouteSpec, HttpApi::Handler>> HttpApi::Table() {
  return {
      {{"POST", "/v1/executions", "submit", Access::kToken, true}, &HttpApi::Submit},
      {{"POST", "/v1/executions/batch", "submit_batch", Access::kToken, true},
       &HttpApi::SubmitBatch},
      {{"GET", "/v1/executions", "list", Access::kToken, true}, &HttpApi::ListExecutions},
      {{"GET", "/v1/executions/{id}", "get", Access::kToken, true}, &HttpApi::Get},
      {{"GET", "/v1/executions/{id}/events", "events", Access::kToken, true}, &HttpApi::Events},
      {{"POST", "/v1/executions/{id}/cancel", "cancel", Access::kToken, true}, &HttpApi::Cancel},
      {{"POST", "/v1/executions/{id}/tool-results", "tool_result", Access::kToken, true},
       &HttpApi::ToolResults},
      // The upgrade is checked on the I/O thread; the channel's Redis work
      // goes to the pool message by message (WsSession).
      {{"GET", "/v1/ws", "websocket", Access::kToken, false}, &HttpApi::WebSocket},
      {{"POST", "/v1/executions/{id}/approve", "approval", Access::kAdmin, true},
       &HttpApi::Approve},
      {{"POST", "/v1/executions/{id}/deny", "approval", Access::kAdmin, true}, &HttpApi::Deny},
      {{"GET", "/v1/approvals", "approvals", Access::kAdmin, true}, &HttpApi::ListApprovals},
      {{"GET", "/v1/audit", "audit", Access::kAdmin, true}, &HttpApi::ReadAudit},
      {{"GET", "/v1/audit/verify", "audit", Access::kAdmin, true}, &HttpApi::VerifyAudit},
      {{"GET", "/v1/sessions", "sessions", Access::kToken, true}, &HttpApi::ListSessions},
      {{"DELETE", "/v1/sessions/{id}", "session_delete", Access::kToken, true},
       &HttpApi::DeleteSession},
      {{"GET", "/v1/capabilities", "capabilities", Access::kToken, false}, &HttpApi::Capabilities},
      {{"GET", "/v1/runtimes", "runtimes", Access::kToken, false}, &HttpApi::Runtimes},
      {{"GET", "/v1/workers", "workers", Access::kAdmin, false}, &HttpApi::ListWorkers},
      {{"GET", "/v1/usage", "usage", Access::kAdmin, true}, &HttpApi::Usage},
      {{"GET", "/v1/health", "health", Access::kPublic, false}, &HttpApi::Health},
      {{"GET", "/metrics", "metrics", Access::kPublic, false}, &HttpApi::Metrics},
  };
}

std::vector<RouteSpec> HttpApi::RouteSpecs() {
  std::vector<RouteSpec> specs;
  for (const auto& [spec, handler] : Table()) specs.push_back(spec);
  return specs;
}

HttpApi::HttpApi(const BrokerConfig& config, HttpApiDeps deps)
    : config_(config), deps_(deps), service_(deps.service), routes_(RouteSpecs()) {
  for (const auto& [spec, handler] : Table()) handlers_.push_back(handler);
}

HttpApi::~HttpApi() { Stop(); }

void HttpApi::Stop() {
  if (server_) server_->Stop();
  if (pool_) pool_->Stop();
}

void HttpApi::Observe(const HttpRequest* req, int status, size_t bytes) {
  const std::string_view route =
      req ? routes_.NameOf(req->method, req->path) : std::string_view("other");
  if (deps_.metrics) deps_.metrics->HttpRequest(std::string(route), status);
  const auto level = status >= 500 ? spdlog::level::warn : spdlog::level::debug;
  if (kLog.enabled(level)) {
    kLog.Log(level, {}, "{} {} -> {} ({} bytes)", req ? req->method : "-", req ? req->path : "-",
             status, bytes);
  }
}

common::StatusOr<Caller> HttpApi::Authenticate(const HttpRequest& req) const {
  const std::string_view h = req.Header("authorization");
  static constexpr std::string_view kBearer = "Bearer ";
  if (h.size() <= kBearer.size() || h.substr(0, kBearer.size()) != kBearer) {
    return Status(Code::kUnauthorized, "missing bearer token");
  }
  return AuthenticateToken(config_, h.substr(kBearer.size()));
}

void HttpApi::Handle(std::shared_ptr<HttpExchange> ex) {
  const HttpRequest& req = ex->request();
  RouteTable::Match m = routes_.Find(req.method, req.path);
  if (m.kind == RouteTable::Match::Kind::kNotFound) {
    return ex->Reply(
        ErrorResponse(common::NotFound("no route for " + req.method + " " + req.path)));
  }
  if (m.kind == RouteTable::Match::Kind::kMethodNotAllowed) {
    HttpResponse r = ErrorResponse(
        Status(Code::kMethodNotAllowed,
               req.method + " is not allowed on " + req.path + " (allowed: " + m.allow + ")"));
    r.headers.emplace_back("Allow", m.allow);
    return ex->Reply(std::move(r));
  }
  const RouteSpec& route = routes_.routes()[m.index];
  if (req.reserve_lane && route.access != Access::kPublic) {
    return ex->Reply(ErrorResponse(common::Unavailable(
        "the broker is at its connection limit: only /v1/health and /metrics are served on "
        "this connection")));
  }
  auto call = std::make_shared<Call>();
  call->ex = ex;
  call->params = std::move(m.params);
  if (route.access != Access::kPublic) {
    auto caller = Authenticate(req);
    if (!caller.ok()) return call->Fail(caller.status());
    if (route.access == Access::kAdmin && !caller->admin) {
      return call->Fail(Status(Code::kForbidden, "admin token required"));
    }
    call->caller = std::move(*caller);
  }
  const Handler handler = handlers_[m.index];
  if (!route.blocking) return (this->*handler)(*call);
  // Admins share one budget; a tenant has its own.
  const TenantConfig* tenant =
      call->caller.admin ? nullptr : FindTenant(config_, call->caller.tenant);
  const size_t limit =
      tenant ? TenantMaxRequests(config_, *tenant) : config_.quotas.tenant_max_requests;
  const std::string who = call->caller.admin ? std::string("admin") : call->caller.tenant;
  call->request_hold = requests_.TryAcquire(who, limit);
  if (!call->request_hold) {
    return call->Fail(Status(Code::kRateLimited, who + " has " + std::to_string(limit) +
                                                     " requests in progress on this broker"));
  }
  if (!pool_->TryPost([this, call, handler] { (this->*handler)(*call); })) {
    call->Fail(common::Unavailable("the broker is busy (" +
                                   std::to_string(config_.http.max_queued_requests) +
                                   " requests queued); retry"));
  }
}

void HttpApi::OnPool(std::function<void()> fn) {
  if (!pool_->TryPost(fn)) fn();
}

void HttpApi::AwaitEnd(std::shared_ptr<HttpExchange> ex, const std::string& id,
                       SteadyClock::time_point deadline, JobWaiters::Handle blocking,
                       QuotaCounter::Hold hold, bool cancel, HttpHeaders headers) {
  auto w = std::make_shared<Waiting>();
  w->headers = std::move(headers);
  w->api = this;
  w->ex = ex;
  w->id = id;
  w->deadline = deadline;
  w->hold = std::move(hold);
  w->cancel = cancel;
  {
    std::lock_guard lock(w->mu);
    // The notice comes on the dispatcher's (or the event bus's) thread: a
    // small record is answered there (no thread hop on the hot path), a
    // large one is serialized on the pool.
    w->watch = deps_.waiters->Watch(id, [w](const JobRecord& r, const std::string* json) {
      if (!w->Claim()) return;
      const size_t size = r.stdout_data.size() + r.stderr_data.size() + r.result_json.size();
      if (size <= kInlineAnswerBytes) return w->Answer(r, json);
      w->api->OnPool([w, r] { w->Answer(r); });
    });
  }
  ex->OnStreamEvents(nullptr, [w] { w->Claim(); });  // the client left: stop waiting
  // The end may have come before the watch: from the handle taken before
  // the job existed, or from the record.
  if (blocking) {
    if (auto r = deps_.waiters->Wait(blocking, SteadyClock::now())) {
      if (w->Claim()) w->Answer(*r);
      return;
    }
  } else {
    auto r = service_->LoadOwned(id);
    if (!r.ok() || IsTerminal(r->status)) {
      if (!w->Claim()) return;
      if (!r.ok()) return ex->Reply(ErrorResponse(r.status()));
      return w->Answer(*r);
    }
  }
  Recheck(w, kRecheckFirst);
}

void HttpApi::Recheck(const std::shared_ptr<Waiting>& w, std::chrono::milliseconds delay) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(w->deadline - SteadyClock::now());
  delay = std::max(std::chrono::milliseconds(1), std::min(delay, left));
  server_->After(delay, [w] {
    if (w->finished()) return;
    w->api->OnPool([w] {
      if (w->finished()) return;
      auto r = w->api->service_->LoadOwned(w->id);
      const bool due = SteadyClock::now() >= w->deadline;
      if (r.ok() && !IsTerminal(r->status) && !due) {
        w->backoff = std::min(w->backoff * 2, kRecheckMax);
        return w->api->Recheck(w, w->backoff);
      }
      if (!r.ok() && !due) return w->api->Recheck(w, w->backoff);
      if (!w->Claim()) return;
      if (!r.ok()) return w->ex->Reply(ErrorResponse(r.status()));
      w->Answer(*r);
    });
  });
}

void HttpApi::Submit(Call& call) {
  const TenantConfig* tenant =
      call.caller.admin ? nullptr : FindTenant(config_, call.caller.tenant);
  QuotaCounter::Hold wait_hold;
  auto admit = [&](const JobSpec& spec) -> Status {
    if (!spec.wait || tenant == nullptr) return Status::Ok();
    const size_t limit = TenantMaxWaits(config_, *tenant);
    wait_hold = waits_.TryAcquire(tenant->name, limit);
    if (wait_hold) return Status::Ok();
    return Status(Code::kRateLimited,
                  "tenant " + tenant->name + " has " + std::to_string(limit) +
                      " requests waiting on this broker; submit with wait:false and follow "
                      "the execution's events");
  };
  // Taken, not copied: a waiting request does not hold its body.
  const std::string body = call.ex->TakeBody();
  auto out = service_->Submit(call.caller, body, std::string(call.req().Header("idempotency-key")),
                              /*register_waiter=*/true, admit);
  if (!out.ok()) return call.Fail(out.status());
  switch (out->kind) {
    case SubmitResult::Kind::kBlocked: {
      json body = ErrorJson(out->blocked);
      body["id"] = out->id;
      body["rule"] = out->rule;
      return call.Reply(common::HttpStatusFor(out->blocked.code()), body);
    }
    case SubmitResult::Kind::kUnconfirmed: {
      // The client learns the id, and that the outcome is unknown.
      json body = ErrorJson(out->blocked);
      body["id"] = out->id;
      body["outcome"] = "unknown";
      return call.Reply(common::HttpStatusFor(out->blocked.code()), body, {{"Retry-After", "1"}});
    }
    case SubmitResult::Kind::kReplay: {
      // A retry: the job the first request created.
      if (!out->wait) {
        auto record = service_->LoadOwned(out->id);
        if (!record.ok()) return call.Fail(record.status());
        return call.Reply(202, {{"id", out->id}, {"status", JobStatusName(record->status)}},
                          {{"Idempotent-Replay", "true"}});
      }
      return AwaitEnd(call.ex, out->id, out->deadline, nullptr, std::move(wait_hold), false,
                      {{"Idempotent-Replay", "true"}});
    }
    case SubmitResult::Kind::kAccepted:
      break;
  }
  if (!out->wait) return call.Reply(202, {{"id", out->id}, {"status", out->status}});
  AwaitEnd(call.ex, out->id, out->deadline, std::move(out->handle), std::move(wait_hold), false);
}

void HttpApi::Get(Call& call) {
  auto answer = service_->Read(call.caller, call.params.at(0));
  if (!answer.ok()) return call.Fail(answer.status());
  call.ex->Reply(HttpResponse{
      200, std::move(answer->json), "application/json", {}, std::move(answer->charge)});
}

void HttpApi::ReplyRecord(Call& call, const JobRecord& record) {
  auto answer = service_->Answer(call.caller, record);
  if (!answer.ok()) return call.Fail(answer.status());
  call.ex->Reply(HttpResponse{
      200, std::move(answer->json), "application/json", {}, std::move(answer->charge)});
}

void HttpApi::Events(Call& call) {
  auto last = ParseLastEventId(call.req().Header("last-event-id"));
  if (!last.ok()) return call.Fail(last.status());
  auto record = service_->Load(call.caller, call.params.at(0));
  if (!record.ok()) return call.Fail(record.status());
  if (last->kind == LastEventId::Kind::kEnd) {
    // The client saw the end event: nothing more will come. 204 tells an
    // EventSource to stop reconnecting.
    return call.ex->Reply(HttpResponse{204, "", "text/event-stream", {}});
  }
  const TenantConfig* tenant =
      call.caller.admin ? nullptr : FindTenant(config_, call.caller.tenant);
  const size_t limit =
      tenant ? TenantMaxStreams(config_, *tenant) : config_.quotas.tenant_max_streams;
  const std::string who = tenant ? tenant->name : std::string("admin");
  QuotaCounter::Hold hold = streams_.TryAcquire(who, limit);
  if (!hold) {
    return call.Fail(Status(Code::kRateLimited, who + " has " + std::to_string(limit) +
                                                    " event streams open on this broker"));
  }
  const size_t unread_limit =
      tenant ? TenantMaxUnreadBytes(config_, *tenant) : config_.quotas.tenant_max_unread_bytes;
  EventStream::Start(call.ex, deps_.follower, server_.get(), *record, *last, std::move(hold),
                     {deps_.unread, who, unread_limit});
}

void HttpApi::Cancel(Call& call) {
  const std::string& id = call.params.at(0);
  const TenantConfig* tenant =
      call.caller.admin ? nullptr : FindTenant(config_, call.caller.tenant);
  QuotaCounter::Hold hold;
  JobWaiters::Handle handle;
  // A job not over yet is waited for: counted against the tenant's waits,
  // and watched before the cancel can end it.
  auto admit = [&](const JobRecord&) -> Status {
    if (tenant) {
      hold = waits_.TryAcquire(tenant->name, TenantMaxWaits(config_, *tenant));
      if (!hold) {
        return Status(Code::kRateLimited,
                      "tenant " + tenant->name + " has too many requests waiting on this broker");
      }
    }
    handle = deps_.waiters->Add(id);
    return Status::Ok();
  };
  auto out = service_->Cancel(call.caller, id, admit);
  if (!out.ok()) {
    if (handle) deps_.waiters->Wait(handle, SteadyClock::now());
    return call.Fail(out.status());
  }
  // Over before the cancel: it changed nothing.
  if (!handle) return ReplyRecord(call, out->record);
  AwaitEnd(call.ex, id, SteadyClock::now() + kCancelWait, std::move(handle), std::move(hold),
           /*cancel=*/true);
}

void HttpApi::ToolResults(Call& call) {
  if (!deps_.tools) return call.Fail(common::Unavailable("this broker relays no tool calls"));
  auto out = deps_.tools->Answer(call.caller, call.params.at(0), call.ex->TakeBody());
  if (!out.ok()) return call.Fail(out.status());
  call.Reply(200, *std::move(out));
}

void HttpApi::WebSocket(Call& call) {
  if (!call.req().websocket_upgrade) {
    HttpResponse r = ErrorResponse(common::InvalidRequest(
        "GET /v1/ws is the WebSocket channel: send a WebSocket upgrade (Upgrade: websocket)"));
    r.status = 426;
    r.headers.emplace_back("Upgrade", "websocket");
    return call.ex->Reply(std::move(r));
  }
  const TenantConfig* tenant =
      call.caller.admin ? nullptr : FindTenant(config_, call.caller.tenant);
  const std::string who = tenant ? tenant->name : std::string("admin");
  const size_t limit =
      tenant ? TenantMaxWebSockets(config_, *tenant) : config_.quotas.tenant_max_websockets;
  QuotaCounter::Hold hold = websockets_.TryAcquire(who, limit);
  if (!hold) {
    return call.Fail(Status(Code::kRateLimited, who + " has " + std::to_string(limit) +
                                                    " WebSocket connections open on this broker"));
  }
  const auto& w = config_.http.websocket;
  WsSession::Deps deps{
      .service = service_,
      .follower = deps_.follower,
      .tools = deps_.tools,
      .streams = &streams_,
      .requests = &requests_,
      .post = [this](std::function<void()> fn) { return pool_->Post(std::move(fn)); }};
  WsSession::Limits limits{.rate = w.messages_per_second,
                           .burst = w.message_burst,
                           .max_follows = w.max_follows,
                           .who = who,
                           .max_streams = tenant ? TenantMaxStreams(config_, *tenant)
                                                 : config_.quotas.tenant_max_streams,
                           .max_requests = tenant ? TenantMaxRequests(config_, *tenant)
                                                  : config_.quotas.tenant_max_requests,
                           .unread = {deps_.unread, who,
                                      tenant ? TenantMaxUnreadBytes(config_, *tenant)
                                             : config_.quotas.tenant_max_unread_bytes}};
  call.ex->AcceptWebSocket({.max_message_bytes = w.max_message_bytes,
                            .idle_timeout = std::chrono::milliseconds(w.idle_timeout_ms)},
                           std::make_shared<WsSession>(call.caller, std::move(hold),
                                                       std::move(deps), std::move(limits)));
}

void HttpApi::SubmitBatch(Call& call) {
  if (call.caller.admin) {
    return call.Fail(Status(Code::kForbidden, "admin tokens cannot submit jobs"));
  }
  // Item i's Idempotency-Key is the request's and ":<i>": a retried batch
  // creates none of its jobs twice.
  const std::string key(call.req().Header("idempotency-key"));
  if (key.size() > 124) {
    return call.Fail(common::InvalidRequest("Idempotency-Key: at most 124 characters on a batch"));
  }
  auto body = common::ParseJson(call.ex->TakeBody(), {}, "request body");
  if (!body.ok()) return call.Fail(body.status());
  auto items = body->find("executions");
  if (!body->is_object() || body->size() != 1 || items == body->end() || !items->is_array()) {
    return call.Fail(common::InvalidRequest(
        "request body: expected {\"executions\": [submit bodies]} and nothing else"));
  }
  if (items->empty() || items->size() > kMaxBatchItems) {
    return call.Fail(
        Status(Code::kLimitExceeded, "executions: 1-" + std::to_string(kMaxBatchItems) +
                                         " items, not " + std::to_string(items->size())));
  }
  json results = json::array();
  for (size_t i = 0; i < items->size(); ++i) {
    json& item = (*items)[i];
    const std::string at = "executions[" + std::to_string(i) + "]";
    if (!item.is_object()) {
      results.push_back(ErrorJson(common::InvalidRequest(at + ": expected an object")));
      continue;
    }
    // A batch answers at once: each job is followed by its id.
    if (auto w = item.find("wait"); w != item.end() && *w != json(false)) {
      results.push_back(ErrorJson(common::InvalidRequest(
          at + ".wait: a batch answers at once; leave it out and follow each execution")));
      continue;
    }
    item["wait"] = false;
    auto out = service_->Submit(call.caller, common::DumpJson(item),
                                key.empty() ? key : key + ":" + std::to_string(i),
                                /*register_waiter=*/false);
    if (!out.ok()) {
      results.push_back(ErrorJson(out.status()));
      continue;
    }
    switch (out->kind) {
      case SubmitResult::Kind::kBlocked: {
        json r = ErrorJson(out->blocked);
        r["id"] = out->id;
        r["rule"] = out->rule;
        results.push_back(std::move(r));
        break;
      }
      case SubmitResult::Kind::kUnconfirmed: {
        json r = ErrorJson(out->blocked);
        r["id"] = out->id;
        r["outcome"] = "unknown";
        results.push_back(std::move(r));
        break;
      }
      case SubmitResult::Kind::kReplay: {
        auto record = service_->LoadOwned(out->id);
        results.push_back(
            record.ok()
                ? json{{"id", out->id}, {"status", JobStatusName(record->status)}, {"replay", true}}
                : ErrorJson(record.status()));
        break;
      }
      case SubmitResult::Kind::kAccepted:
        results.push_back({{"id", out->id}, {"status", out->status}});
        break;
    }
  }
  call.Reply(200, {{"results", std::move(results)}});
}

void HttpApi::ListExecutions(Call& call) {
  const HttpRequest& req = call.req();
  JobStore::ListQuery query;
  // An integer parameter in [min, max], or a clear error naming it.
  const auto number = [&](const char* name, int64_t min, int64_t max, int64_t* out) -> Status {
    if (!req.query.count(name)) return Status::Ok();
    const std::string v = req.Param(name);
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), *out);
    if (ec != std::errc() || p != v.data() + v.size() || *out < min || *out > max) {
      return common::InvalidRequest(std::string(name) + ": expected an integer " +
                                    std::to_string(min) + "-" + std::to_string(max));
    }
    return Status::Ok();
  };
  constexpr int64_t kMaxMs = 9999999999999;  // ms since the epoch: up to the year 2286
  int64_t limit = 20;
  if (auto st = number("since", 0, kMaxMs, &query.since_ms); !st.ok()) return call.Fail(st);
  if (auto st = number("until", 0, kMaxMs, &query.until_ms); !st.ok()) return call.Fail(st);
  if (auto st = number("limit", 1, 100, &limit); !st.ok()) return call.Fail(st);
  query.limit = static_cast<size_t>(limit);
  const std::string session = req.Param("session_id");
  if (req.query.count("session_id") && !IsSessionName(session)) {
    return call.Fail(common::InvalidRequest("session_id: 1-128 of [A-Za-z0-9._:-]"));
  }
  if (req.query.count("status")) {
    const std::string list = req.Param("status");
    for (size_t at = 0; at <= list.size();) {
      size_t comma = std::min(list.find(',', at), list.size());
      const std::string name = list.substr(at, comma - at);
      if (!ParseJobStatus(name).ok()) {
        return call.Fail(common::InvalidRequest("status: '" + name.substr(0, 64) +
                                                "' is not a status (queued, running, succeeded, "
                                                "failed, ...)"));
      }
      if (query.statuses.size() == 16) {
        return call.Fail(common::InvalidRequest("status: at most 16 statuses"));
      }
      query.statuses.push_back(name);
      at = comma + 1;
    }
  }
  query.cursor = req.Param("cursor");
  if (req.query.count("cursor") && !JobStore::IsListCursor(query.cursor)) {
    return call.Fail(common::InvalidRequest("cursor: not one this API handed out"));
  }
  auto page = service_->ListExecutions(call.caller, req.Param("tenant"), session, std::move(query));
  if (!page.ok()) return call.Fail(page.status());
  json items = json::array();
  const auto ms = [](int64_t v) { return v > 0 ? json(v) : json(nullptr); };
  for (const auto& e : page->entries) {
    items.push_back(
        {{"id", e.id},
         {"status", e.status},
         {"language", e.language},
         {"session_id", e.session_key.empty() ? json(nullptr)
                                              : json(common::protocol::SessionIdOf(e.session_key))},
         {"created_at_ms", ms(e.created_ms)},
         {"started_at_ms", ms(e.started_ms)},
         {"finished_at_ms", ms(e.finished_ms)}});
  }
  call.Reply(
      200, {{"executions", std::move(items)},
            {"next_cursor", page->next_cursor.empty() ? json(nullptr) : json(page->next_cursor)}});
}

void HttpApi::ListSessions(Call& call) {
  auto list = service_->ListSessions(call.caller, call.req().Param("tenant"),
                                     call.req().Param("conversation_id"));
  if (!list.ok()) return call.Fail(list.status());
  json out = json::array();
  for (const auto& s : *list) out.push_back(s.ToJson());
  call.Reply(200, {{"sessions", out}});
}

void HttpApi::DeleteSession(Call& call) {
  const std::string& sid = call.params.at(0);
  auto cancelled = service_->DeleteSession(call.caller, sid);
  if (!cancelled.ok()) return call.Fail(cancelled.status());
  call.Reply(200, {{"id", sid}, {"state", "deleted"}, {"cancelled", *cancelled}});
}

}  // namespace kiln::broker
