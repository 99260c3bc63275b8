#include "broker/api/http_api.hpp"

#include <algorithm>
#include <charconv>

#include "broker/api/event_stream.hpp"
#include "broker/api/sse_events.hpp"
#include "broker/job/lifecycle.hpp"
#include "broker/metrics/broker_metrics.hpp"
#include "common/clock.hpp"
#include "common/json/bounded_json.hpp"
#include "common/log/logging.hpp"
#include "common/protocol/session_key.hpp"

namespace kiln::broker {
namespace {

const common::SubsystemLog kLog("http");

using common::Code;
using common::Status;
using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

// How long a cancel request waits for the job to end before answering 202.
constexpr auto kCancelWait = std::chrono::seconds(5);
// A waiting request re-reads the record this often (then doubling, up to
// kRecheckMax), in case the notice of its end was lost.
constexpr auto kRecheckFirst = std::chrono::milliseconds(1000);
constexpr auto kRecheckMax = std::chrono::milliseconds(8000);
// A finished job's record up to this size (output and result) is answered on
// the thread that learnt of the end.
constexpr size_t kInlineAnswerBytes = 64u << 10;
// How long GET /v1/health waits for Redis to answer a PING.
constexpr auto kHealthWait = std::chrono::milliseconds(500);

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

HttpResponse JsonResponse(int status, const json& body, HttpHeaders headers = {}) {
  return HttpResponse{status, Dump(body), "application/json", std::move(headers)};
}

HttpResponse ErrorResponse(const Status& st) {
  HttpHeaders headers;
  if (st.code() == Code::kUnauthorized) headers.emplace_back("WWW-Authenticate", "Bearer");
  const int status = common::HttpStatusFor(st.code());
  if (status == 429 || status == 503) headers.emplace_back("Retry-After", "1");
  return JsonResponse(status, ErrorJson(st), std::move(headers));
}

// The route table: one line per route (method, path, metrics label, who,
// blocking), and its handler at the same index.
struct RouteLine {
  RouteSpec spec;
  HttpApi::Handler handler;
};

}  // namespace

struct HttpApi::Call {
  std::shared_ptr<HttpExchange> ex;
  Caller caller;
  std::vector<std::string> params;
  QuotaCounter::Hold request_hold;  // released when the handler returns

  const HttpRequest& req() const { return ex->request(); }
  void Reply(int status, const json& body, HttpHeaders headers = {}) const {
    ex->Reply(JsonResponse(status, body, std::move(headers)));
  }
  void Fail(const Status& st) const { ex->Reply(ErrorResponse(st)); }
};

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
  // The answer for a record (terminal, or current at the deadline).
  void Answer(const JobRecord& r) {
    if (!cancel || IsTerminal(r.status)) {
      // A wait's answer cannot be refused any more: charged all the same,
      // so the tenant's later GETs see it.
      HttpResponse res = JsonResponse(200, r.ToJson(), headers);
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
  api->pool_ = std::make_unique<WorkPool>(h.threads, h.max_queued_requests);
  return api;
}

HttpApi::HttpApi(const BrokerConfig& config, HttpApiDeps deps)
    : config_(config),
      deps_(deps),
      store_(deps.stores.jobs),
      schedule_(deps.stores.schedule),
      sessions_(deps.stores.sessions),
      submits_(config, deps.stores, deps.dispatcher, deps.waiters, deps.metrics, deps.governance),
      routes_({}) {
  const std::vector<RouteLine> lines = {
      {{"POST", "/v1/executions", "submit", Access::kToken, true}, &HttpApi::Submit},
      {{"GET", "/v1/executions/{id}", "get", Access::kToken, true}, &HttpApi::Get},
      {{"GET", "/v1/executions/{id}/events", "events", Access::kToken, true}, &HttpApi::Events},
      {{"POST", "/v1/executions/{id}/cancel", "cancel", Access::kToken, true}, &HttpApi::Cancel},
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
      {{"GET", "/v1/workers", "workers", Access::kAdmin, false}, &HttpApi::ListWorkers},
      {{"GET", "/v1/health", "health", Access::kPublic, false}, &HttpApi::Health},
      {{"GET", "/metrics", "metrics", Access::kPublic, false}, &HttpApi::Metrics},
  };
  std::vector<RouteSpec> specs;
  for (const auto& l : lines) {
    specs.push_back(l.spec);
    handlers_.push_back(l.handler);
  }
  routes_ = RouteTable(std::move(specs));
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

Status HttpApi::StoreError(const Status& st) const {
  if (deps_.metrics) deps_.metrics->RedisError();
  return Status(Code::kUnavailable, st.message());
}

common::StatusOr<JobRecord> HttpApi::LoadForCaller(const Call& call) const {
  const std::string& id = call.params.at(0);
  auto record = store_->Load(id);
  if (!record.ok()) {
    if (record.status().code() == Code::kNotFound) return record.status();
    return StoreError(record.status());
  }
  // Another tenant's job is indistinguishable from a missing one.
  if (!call.caller.admin && record->tenant != call.caller.tenant) {
    return common::NotFound("no execution with id " + id);
  }
  return record;
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
    w->watch = deps_.waiters->Watch(id, [w](const JobRecord& r) {
      if (!w->Claim()) return;
      const size_t size = r.stdout_data.size() + r.stderr_data.size() + r.result_json.size();
      if (size <= kInlineAnswerBytes) return w->Answer(r);
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
    auto r = store_->Load(id);
    if (!r.ok() || IsTerminal(r->status)) {
      if (!w->Claim()) return;
      if (!r.ok()) return ex->Reply(ErrorResponse(StoreError(r.status())));
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
      auto r = w->api->store_->Load(w->id);
      const bool due = SteadyClock::now() >= w->deadline;
      if (r.ok() && !IsTerminal(r->status) && !due) {
        w->backoff = std::min(w->backoff * 2, kRecheckMax);
        return w->api->Recheck(w, w->backoff);
      }
      if (!r.ok() && !due) return w->api->Recheck(w, w->backoff);
      if (!w->Claim()) return;
      if (!r.ok()) return w->ex->Reply(ErrorResponse(w->api->StoreError(r.status())));
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
  auto out = submits_.Submit(call.caller, body, std::string(call.req().Header("idempotency-key")),
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
        auto record = store_->Load(out->id);
        if (!record.ok()) return call.Fail(StoreError(record.status()));
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
  const std::string& id = call.params.at(0);
  auto peek = store_->PeekRecord(id);
  if (!peek.ok()) {
    return call.Fail(peek.status().code() == Code::kNotFound ? peek.status()
                                                             : StoreError(peek.status()));
  }
  // Another tenant's job is indistinguishable from a missing one.
  if (!call.caller.admin && peek->tenant != call.caller.tenant) {
    return call.Fail(common::NotFound("no execution with id " + id));
  }
  if (!IsTerminal(peek->status)) {
    // Live fields join the stored record (which holds no output yet).
    auto record = LoadForCaller(call);
    if (!record.ok()) return call.Fail(record.status());
    return ReplyRecord(call, *record);
  }
  // A terminal record is answered as stored: charged before it is read,
  // and never parsed (one copy of up to max_output_bytes, not six).
  Status refused;
  auto charge = ChargeBytes(call, peek->record_bytes, &refused);
  if (!charge) return call.Fail(refused);
  auto text = store_->RecordText(id);
  if (!text.ok()) {
    return call.Fail(text.status().code() == Code::kNotFound ? text.status()
                                                             : StoreError(text.status()));
  }
  HttpResponse res{200, std::move(*text), "application/json", {}, std::move(charge)};
  call.ex->Reply(std::move(res));
}

UnreadBudget::Charge HttpApi::ChargeBytes(const Call& call, size_t bytes, Status* refused) {
  const TenantConfig* tenant =
      call.caller.admin ? nullptr : FindTenant(config_, call.caller.tenant);
  const size_t limit =
      tenant ? TenantMaxUnreadBytes(config_, *tenant) : config_.quotas.tenant_max_unread_bytes;
  const std::string who = tenant ? tenant->name : std::string("admin");
  auto charge = deps_.unread->TryCharge(who, bytes, limit);
  if (!charge) {
    *refused = Status(Code::kRateLimited,
                      "the clients of " + who + " have " + std::to_string(deps_.unread->held(who)) +
                          " bytes of answers they have not read yet on this broker "
                          "(quotas.tenant_max_unread_bytes " +
                          std::to_string(limit) + "); read them, then retry");
  }
  return charge;
}

void HttpApi::ReplyRecord(Call& call, const JobRecord& record) {
  Status refused;
  auto charge = ChargeBytes(call, record.ApproxJsonBytes(), &refused);
  if (!charge) return call.Fail(refused);
  HttpResponse res = JsonResponse(200, record.ToJson());
  res.keep = std::move(charge);
  call.ex->Reply(std::move(res));
}

void HttpApi::Events(Call& call) {
  auto last = ParseLastEventId(call.req().Header("last-event-id"));
  if (!last.ok()) return call.Fail(last.status());
  auto record = LoadForCaller(call);
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
  auto record = LoadForCaller(call);
  if (!record.ok()) return call.Fail(record.status());
  const std::string id = record->id;
  // Cancelling a finished job changes nothing: answer with its record.
  if (IsTerminal(record->status)) return ReplyRecord(call, *record);
  const TenantConfig* tenant =
      call.caller.admin ? nullptr : FindTenant(config_, call.caller.tenant);
  QuotaCounter::Hold hold;
  if (tenant) {
    hold = waits_.TryAcquire(tenant->name, TenantMaxWaits(config_, *tenant));
    if (!hold) {
      return call.Fail(Status(Code::kRateLimited, "tenant " + tenant->name +
                                                      " has too many requests waiting on this "
                                                      "broker"));
    }
  }
  auto handle = deps_.waiters->Add(id);
  auto drop = [&] { deps_.waiters->Wait(handle, SteadyClock::now()); };
  auto t = JobLifecycle::Apply(*record, {.event = JobEvent::kCancel, .now_ms = common::NowMs()});
  if (!t.ok()) {
    drop();
    return call.Fail(t.status());
  }
  // Queued or held jobs live in Redis: any broker ends them, unless one has
  // just started it (then the cancel below reaches it like a running one).
  if (t->Has(JobAction::kStoreEnd)) {
    if (auto out = deps_.dispatcher->EndJob(*t); !out.ok()) {
      drop();
      return call.Fail(StoreError(out.status()));
    }
  }
  // Running: the broker that owns it tells its worker; the worker's Result
  // (reason cancelled) ends it.
  if (t->Has(JobAction::kTellWorker)) {
    if (auto st = schedule_->PublishCancel(id); !st.ok()) {
      drop();
      return call.Fail(StoreError(st));
    }
  }
  AwaitEnd(call.ex, id, SteadyClock::now() + kCancelWait, std::move(handle), std::move(hold),
           /*cancel=*/true);
}

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
  auto record = store_->Load(id);
  if (!record.ok()) {
    return call.Fail(record.status().code() == Code::kNotFound ? record.status()
                                                               : StoreError(record.status()));
  }
  // The approve script decides under Redis's lock; a job plainly not held
  // is answered without it.
  if (auto t = JobLifecycle::Apply(*record, {.event = JobEvent::kApprove}); !t.ok()) {
    return call.Fail(t.status());
  }
  auto out =
      deps_.dispatcher->Approve(id, trust, "admin:" + std::to_string(call.caller.admin_index));
  if (!out.ok()) return call.Fail(StoreError(out.status()));
  switch (out->kind) {
    case ApproveOutcome::Kind::kMissing:
      return call.Fail(common::NotFound("no execution with id " + id));
    case ApproveOutcome::Kind::kNotAwaiting:
      return call.Fail(common::InvalidRequest(
          "execution " + id + " is not awaiting approval (it is " + out->status + ")"));
    case ApproveOutcome::Kind::kSessionGone: {
      auto t = JobLifecycle::Apply(*record,
                                   {.event = JobEvent::kSessionDeleted, .now_ms = common::NowMs()});
      if (t.ok() && t->Has(JobAction::kStoreEnd)) (void)deps_.dispatcher->EndJob(*t);
      return call.Reply(200, {{"id", id}, {"status", "cancelled"}});
    }
    default:
      break;
  }
  if (deps_.metrics) deps_.metrics->Approval(record->tenant, "approved");
  call.Reply(200, {{"id", id},
                   {"status", out->kind == ApproveOutcome::Kind::kStarted ? "running" : "queued"},
                   {"trust_session", trust}});
}

void HttpApi::Deny(Call& call) {
  const std::string& id = call.params.at(0);
  auto record = store_->Load(id);
  if (!record.ok()) {
    return call.Fail(record.status().code() == Code::kNotFound ? record.status()
                                                               : StoreError(record.status()));
  }
  auto t =
      JobLifecycle::Apply(*record, {.event = JobEvent::kDeny,
                                    .now_ms = common::NowMs(),
                                    .detail = "admin:" + std::to_string(call.caller.admin_index)});
  if (!t.ok()) return call.Fail(t.status());
  const JobRecord& ended = t->record;
  auto out = deps_.dispatcher->EndJob(*t);
  if (!out.ok()) return call.Fail(StoreError(out.status()));
  if (out->kind != FinishOutcome::Kind::kStored) {
    return call.Fail(common::InvalidRequest(
        "execution " + id + " is no longer awaiting approval (it is " + out->status + ")"));
  }
  if (deps_.metrics) deps_.metrics->Approval(record->tenant, "denied");
  call.Reply(200, ended.ToJson());
}

void HttpApi::ListApprovals(Call& call) {
  auto pending = schedule_->PendingApprovals(500);
  if (!pending.ok()) return call.Fail(StoreError(pending.status()));
  json list = json::array();
  for (const auto& [id, deadline] : *pending) {
    auto spec = store_->LoadSpec(id);
    if (!spec.ok()) continue;
    list.push_back(
        {{"id", id},
         {"tenant", spec->tenant},
         {"language", spec->language},
         {"session_id", spec->session_id.empty() ? json(nullptr) : json(spec->session_id)},
         {"code", spec->code},
         {"warnings", spec->warnings},
         {"created_at", spec->created_ms},
         {"expires_at", deadline}});
  }
  call.Reply(200, {{"approvals", list}});
}

void HttpApi::ReadAudit(Call& call) {
  if (!deps_.governance.audit) return call.Fail(common::NotFound("the audit trail is off"));
  size_t count = 500;
  if (call.req().query.count("count")) {
    const std::string c = call.req().Param("count");
    auto [p, ec] = std::from_chars(c.data(), c.data() + c.size(), count);
    if (ec != std::errc() || p != c.data() + c.size() || count == 0 || count > 10000) {
      return call.Fail(common::InvalidRequest("count: 1-10000"));
    }
  }
  auto page = deps_.governance.audit->Read(call.req().Param("after"), count);
  if (!page.ok()) {
    return call.Fail(page.status().code() == Code::kInvalidRequest ? page.status()
                                                                   : StoreError(page.status()));
  }
  json entries = json::array();
  for (const auto& e : page->entries) entries.push_back(e.ToExportJson());
  call.Reply(200,
             {{"entries", entries},
              {"anchor", page->anchor},
              {"head", page->head},
              {"next", page->entries.empty() ? json(nullptr) : json(page->entries.back().id)}});
}

void HttpApi::VerifyAudit(Call& call) {
  if (!deps_.governance.audit) return call.Fail(common::NotFound("the audit trail is off"));
  auto report = deps_.governance.audit->Verify();
  if (!report.ok()) return call.Fail(StoreError(report.status()));
  json body = {{"ok", !report->broken}, {"checked", report->checked}, {"broken", nullptr}};
  if (report->broken) {
    body["broken"] = {{"index", report->broken->index},
                      {"id", report->broken->id},
                      {"reason", report->broken->reason}};
  }
  call.Reply(200, body);
}

void HttpApi::ListSessions(Call& call) {
  std::string tenant = call.caller.tenant;
  if (call.caller.admin) {
    tenant = call.req().Param("tenant");
    if (FindTenant(config_, tenant) == nullptr) {
      return call.Fail(common::InvalidRequest("tenant: an admin names a tenant with ?tenant="));
    }
  }
  auto list = sessions_->List(tenant, call.req().Param("conversation_id"));
  if (!list.ok()) return call.Fail(StoreError(list.status()));
  json out = json::array();
  for (const auto& s : *list) out.push_back(s.ToJson());
  call.Reply(200, {{"sessions", out}});
}

void HttpApi::DeleteSession(Call& call) {
  if (call.caller.admin) {
    return call.Fail(Status(Code::kForbidden, "sessions are deleted with a tenant's token"));
  }
  const std::string& sid = call.params.at(0);
  auto deleted = sessions_->Delete(call.caller.tenant, sid);
  if (!deleted.ok()) {
    return call.Fail(deleted.status().code() == Code::kSessionNotFound
                         ? deleted.status()
                         : StoreError(deleted.status()));
  }
  json cancelled = json::array();
  for (const auto& id : deleted->queued_jobs) {
    auto record = store_->Load(id);
    if (!record.ok() || record->status != JobStatus::kQueued) continue;
    auto t = JobLifecycle::Apply(*record,
                                 {.event = JobEvent::kSessionDeleted, .now_ms = common::NowMs()});
    if (t.ok() && t->Has(JobAction::kStoreEnd) && deps_.dispatcher->EndJob(*t).ok()) {
      cancelled.push_back(id);
    }
  }
  // Its running execution (JobAction::kTellWorker of a running job; its
  // record is not read for it): the worker's Result ends it.
  if (!deleted->running_job.empty()) {
    (void)schedule_->PublishCancel(deleted->running_job);
    cancelled.push_back(deleted->running_job);
  }
  // Its sandbox goes now (once a running execution has ended).
  if (!deleted->worker.empty()) {
    deps_.dispatcher->CloseSession(deleted->worker,
                                   common::protocol::SessionKey(call.caller.tenant, sid));
  }
  call.Reply(200, {{"id", sid}, {"state", "deleted"}, {"cancelled", cancelled}});
}

void HttpApi::Capabilities(Call& call) {
  const TenantConfig* t = call.caller.admin ? nullptr : FindTenant(config_, call.caller.tenant);
  call.Reply(200, {{"tenant", t ? json(t->name) : json(nullptr)},
                   {"code_execution", t != nullptr && t->enabled},
                   {"auto_approve", t != nullptr && t->auto_approve},
                   {"isolation", t ? json(t->isolation) : json(nullptr)},
                   // What this tenant's jobs can run on: its own level's workers.
                   {"runtimes",
                    t ? deps_.dispatcher->RuntimesAt(t->isolation) : deps_.dispatcher->Runtimes()},
                   {"isolation_levels", deps_.dispatcher->IsolationLevels()}});
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
