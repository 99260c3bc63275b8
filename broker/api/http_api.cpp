#include "broker/api/http_api.hpp"

#include <httplib.h>

#include <algorithm>
#include <charconv>
#include <thread>

#include "broker/api/submit_request.hpp"
#include "broker/metrics/broker_metrics.hpp"
#include "common/clock.hpp"
#include "common/log/logging.hpp"

namespace kiln::broker {
namespace {

const common::SubsystemLog kLog("http");

using common::Code;
using common::Status;
using nlohmann::json;

// How long a cancel request waits for the job to end before answering 202.
constexpr auto kCancelWait = std::chrono::seconds(5);
// How long an event stream waits in Redis for new output before it checks
// whether the job has ended (and tells the client it is still there).
constexpr auto kSsePoll = std::chrono::milliseconds(250);

// The route a request matched, by name: a bounded label, never the path
// (which holds job ids).
const char* RouteName(const httplib::Request& req) {
  std::string_view path = req.path;
  static constexpr std::string_view kExecutions = "/v1/executions";
  if (path == "/metrics") return "metrics";
  if (path == "/v1/health") return "health";
  if (path == "/v1/workers") return "workers";
  if (path == "/v1/capabilities") return "capabilities";
  if (path == "/v1/approvals") return "approvals";
  if (path == "/v1/audit" || path == "/v1/audit/verify") return "audit";
  if (path == "/v1/sessions") return "sessions";
  if (path.substr(0, 13) == "/v1/sessions/")
    return req.method == "DELETE" ? "session_delete" : "other";
  if (path == kExecutions) return req.method == "POST" ? "submit" : "other";
  if (path.substr(0, kExecutions.size() + 1) != "/v1/executions/") return "other";
  std::string_view rest = path.substr(kExecutions.size() + 1);
  auto slash = rest.find('/');
  if (slash == std::string_view::npos) return req.method == "GET" ? "get" : "other";
  std::string_view tail = rest.substr(slash);
  if (tail == "/events" && req.method == "GET") return "events";
  if (tail == "/cancel" && req.method == "POST") return "cancel";
  if ((tail == "/approve" || tail == "/deny") && req.method == "POST") return "approval";
  return "other";
}

void Reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void ReplyError(httplib::Response& res, const Status& st) {
  if (st.code() == Code::kUnauthorized) {
    res.set_header("WWW-Authenticate", "Bearer");
  }
  if (st.code() == Code::kQueueFull || st.code() == Code::kUnavailable) {
    res.set_header("Retry-After", "1");
  }
  Reply(res, common::HttpStatusFor(st.code()), ErrorJson(st));
}

}  // namespace

common::StatusOr<std::unique_ptr<HttpApi>> HttpApi::Create(
    const BrokerConfig& config, DispatcherStores stores, Dispatcher* dispatcher,
    JobWaiters* waiters, BrokerMetrics* metrics, Governance governance) {
  std::unique_ptr<HttpApi> api(
      new HttpApi(config, stores, dispatcher, waiters, metrics, governance));
  ASSIGN_OR_RETURN(api->redis_endpoint_, RedisEndpoint::Parse(config.redis_url));
  const std::string& listen = config.http.listen;
  auto colon = listen.rfind(':');
  if (colon == std::string::npos) {
    return common::InvalidRequest("broker.http.listen: expected host:port, got " + listen);
  }
  std::string host = listen.substr(0, colon);
  int port = 0;
  auto [p, ec] = std::from_chars(listen.data() + colon + 1, listen.data() + listen.size(), port);
  if (ec != std::errc() || p != listen.data() + listen.size() || port < 0 || port > 65535) {
    return common::InvalidRequest("broker.http.listen: bad port in " + listen);
  }
  if (port == 0) {
    api->port_ = api->server_->bind_to_any_port(host);
  } else {
    api->port_ = api->server_->bind_to_port(host, port) ? port : -1;
  }
  if (api->port_ <= 0) {
    return common::InvalidRequest("broker.http.listen: cannot listen on " + listen);
  }
  return api;
}

HttpApi::HttpApi(const BrokerConfig& config, DispatcherStores stores, Dispatcher* dispatcher,
                 JobWaiters* waiters, BrokerMetrics* metrics, Governance governance)
    : config_(config),
      store_(stores.jobs),
      schedule_(stores.schedule),
      sessions_(stores.sessions),
      dispatcher_(dispatcher),
      waiters_(waiters),
      metrics_(metrics),
      governance_(governance),
      submits_(config, stores, dispatcher, waiters, metrics, governance),
      server_(std::make_unique<httplib::Server>()) {
  const size_t threads = config.http.threads;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server_->set_payload_max_length(config.http.max_body_bytes);
  server_->set_read_timeout(10, 0);
  server_->set_keep_alive_max_count(1000);
  // httplib writes headers and body separately: without TCP_NODELAY the body
  // waits ~40 ms for the client's delayed ACK on every kept-alive request.
  server_->set_tcp_nodelay(true);
  Routes();
}

HttpApi::~HttpApi() = default;

void HttpApi::Serve() { server_->listen_after_bind(); }
void HttpApi::Stop() { server_->stop(); }

void HttpApi::Routes() {
  auto& s = *server_;
  s.Post("/v1/executions",
         [this](const httplib::Request& q, httplib::Response& r) { Submit(q, r); });
  s.Get(R"(/v1/executions/([^/]+))",
        [this](const httplib::Request& q, httplib::Response& r) { Get(q, r); });
  s.Get(R"(/v1/executions/([^/]+)/events)",
        [this](const httplib::Request& q, httplib::Response& r) { Events(q, r); });
  s.Post(R"(/v1/executions/([^/]+)/cancel)",
         [this](const httplib::Request& q, httplib::Response& r) { Cancel(q, r); });
  s.Post(R"(/v1/executions/([^/]+)/approve)",
         [this](const httplib::Request& q, httplib::Response& r) { Approve(q, r); });
  s.Post(R"(/v1/executions/([^/]+)/deny)",
         [this](const httplib::Request& q, httplib::Response& r) { Deny(q, r); });
  s.Get("/v1/approvals",
        [this](const httplib::Request& q, httplib::Response& r) { ListApprovals(q, r); });
  s.Get("/v1/audit", [this](const httplib::Request& q, httplib::Response& r) { ReadAudit(q, r); });
  s.Get("/v1/audit/verify",
        [this](const httplib::Request& q, httplib::Response& r) { VerifyAudit(q, r); });
  s.Get("/v1/sessions",
        [this](const httplib::Request& q, httplib::Response& r) { ListSessions(q, r); });
  s.Delete(R"(/v1/sessions/([^/]+))",
           [this](const httplib::Request& q, httplib::Response& r) { DeleteSession(q, r); });
  s.Get("/v1/capabilities",
        [this](const httplib::Request& q, httplib::Response& r) { Capabilities(q, r); });
  s.Get("/v1/workers",
        [this](const httplib::Request& q, httplib::Response& r) { ListWorkers(q, r); });
  s.Get("/v1/health", [this](const httplib::Request& q, httplib::Response& r) { Health(q, r); });
  s.Get("/metrics", [this](const httplib::Request& q, httplib::Response& r) { Metrics(q, r); });
  // Called once each request has been answered: an access log at debug
  // (server errors at warn), and the request counter.
  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    if (metrics_) metrics_->HttpRequest(RouteName(req), res.status);
    const auto level = res.status >= 500 ? spdlog::level::warn : spdlog::level::debug;
    if (kLog.enabled(level)) {
      kLog.Log(level, {}, "{} {} -> {} ({} bytes)", req.method, req.path, res.status,
               res.body.size());
    }
  });
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    // Only fill bodies httplib left empty (its own 400/404/413 answers).
    if (!res.body.empty()) return;
    Code code = res.status == 404 ? Code::kNotFound : Code::kInvalidRequest;
    std::string msg = res.status == 404   ? "no route for " + req.method + " " + req.path
                      : res.status == 413 ? "request body too large"
                                          : "malformed HTTP request";
    int status = res.status;
    Reply(res, status, ErrorJson(Status(code, msg)));
  });
  s.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown error";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        kLog.Error({}, "{} {} failed: {}", req.method, req.path, what);
        Reply(res, 500, ErrorJson(common::Internal("internal error")));
      });
}

common::StatusOr<Caller> HttpApi::Authenticate(const httplib::Request& req) const {
  const std::string& h = req.get_header_value("Authorization");
  static constexpr std::string_view kBearer = "Bearer ";
  if (h.size() <= kBearer.size() || h.compare(0, kBearer.size(), kBearer) != 0) {
    return Status(Code::kUnauthorized, "missing bearer token");
  }
  return AuthenticateToken(config_, std::string_view(h).substr(kBearer.size()));
}

void HttpApi::Submit(const httplib::Request& req, httplib::Response& res) {
  auto caller = Authenticate(req);
  if (!caller.ok()) return ReplyError(res, caller.status());
  auto out = submits_.Submit(*caller, req.body, req.get_header_value("Idempotency-Key"),
                             /*register_waiter=*/true);
  if (!out.ok()) return ReplyError(res, out.status());
  switch (out->kind) {
    case SubmitResult::Kind::kBlocked: {
      json body = ErrorJson(out->blocked);
      body["id"] = out->id;
      body["rule"] = out->rule;
      return Reply(res, common::HttpStatusFor(out->blocked.code()), body);
    }
    case SubmitResult::Kind::kReplay:
      res.set_header("Idempotent-Replay", "true");
      return ReplyWithJob(res, out->id, out->wait, out->deadline);
    case SubmitResult::Kind::kAccepted:
      break;
  }
  if (!out->wait) return Reply(res, 202, {{"id", out->id}, {"status", out->status}});
  auto record = AwaitEnd(std::move(out->handle), out->id, out->deadline);
  if (!record.ok()) return ReplyError(res, StoreError(record.status()));
  Reply(res, 200, record->ToJson());
}

common::StatusOr<JobRecord> HttpApi::AwaitEnd(JobWaiters::Handle handle, const std::string& id,
                                              std::chrono::steady_clock::time_point deadline) {
  constexpr auto kRecheck = std::chrono::seconds(1);
  while (true) {
    auto until = std::min(deadline, std::chrono::steady_clock::now() + kRecheck);
    if (auto record = waiters_->Wait(handle, until)) return std::move(*record);
    // Register again before reading, so an end between the two is not missed.
    handle = waiters_->Add(id);
    auto current = store_->Load(id);
    if (!current.ok() || IsTerminal(current->status) ||
        std::chrono::steady_clock::now() >= deadline) {
      waiters_->Wait(handle, std::chrono::steady_clock::now());
      return current;
    }
  }
}

void HttpApi::ReplyWithJob(httplib::Response& res, const std::string& id, bool wait,
                           std::chrono::steady_clock::time_point deadline) {
  while (true) {
    auto record = store_->Load(id);
    if (!record.ok()) return ReplyError(res, StoreError(record.status()));
    if (!wait) return Reply(res, 202, {{"id", id}, {"status", JobStatusName(record->status)}});
    if (IsTerminal(record->status) || std::chrono::steady_clock::now() >= deadline) {
      return Reply(res, 200, record->ToJson());
    }
    // Another request (maybe on another broker) owns the waiter: poll.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

common::StatusOr<JobRecord> HttpApi::LoadForCaller(const httplib::Request& req) const {
  ASSIGN_OR_RETURN(Caller caller, Authenticate(req));
  const std::string id = req.matches[1];
  auto record = store_->Load(id);
  if (!record.ok()) {
    if (record.status().code() == Code::kNotFound) return record.status();
    return StoreError(record.status());
  }
  // Another tenant's job is indistinguishable from a missing one.
  if (!caller.admin && record->tenant != caller.tenant) {
    return common::NotFound("no execution with id " + id);
  }
  return record;
}

void HttpApi::Cancel(const httplib::Request& req, httplib::Response& res) {
  auto record = LoadForCaller(req);
  if (!record.ok()) return ReplyError(res, record.status());
  const std::string id = record->id;
  // Cancelling a finished job changes nothing: answer with its record.
  if (IsTerminal(record->status)) return Reply(res, 200, record->ToJson());
  auto handle = waiters_->Add(id);
  if (record->status == JobStatus::kQueued) {
    // Queued jobs live in Redis: any broker ends them, unless one has just
    // started it (then it is cancelled like a running one).
    JobRecord ended = *record;
    ended.status = JobStatus::kCancelled;
    ended.error = JobError{"CANCELLED", "cancelled before it started", false, "", ""};
    ended.queue_position.reset();
    ended.wait_reason.clear();
    ended.finished_ms = common::NowMs();
    auto out = dispatcher_->EndJob(ended, FinishExpect::kQueued);
    if (!out.ok()) {
      waiters_->Wait(handle, std::chrono::steady_clock::now());
      return ReplyError(res, StoreError(out.status()));
    }
  }
  // Running: the broker that owns it tells its worker; the worker's Result
  // (reason cancelled) ends it.
  if (auto st = schedule_->PublishCancel(id); !st.ok()) {
    waiters_->Wait(handle, std::chrono::steady_clock::now());
    return ReplyError(res, StoreError(st));
  }
  auto done = AwaitEnd(std::move(handle), id, std::chrono::steady_clock::now() + kCancelWait);
  if (!done.ok()) return ReplyError(res, StoreError(done.status()));
  // Still ending (the worker has not confirmed yet) answers 202: the record will say.
  Reply(res, IsTerminal(done->status) ? 200 : 202,
        IsTerminal(done->status) ? done->ToJson()
                                 : json{{"id", id}, {"status", JobStatusName(done->status)}});
}

void HttpApi::Approve(const httplib::Request& req, httplib::Response& res) {
  auto caller = Authenticate(req);
  if (!caller.ok()) return ReplyError(res, caller.status());
  if (!caller->admin) return ReplyError(res, Status(Code::kForbidden, "admin token required"));
  bool trust = false;
  if (!req.body.empty()) {
    json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object()) {
      return ReplyError(res, common::InvalidRequest("body must be a JSON object"));
    }
    for (const auto& [key, value] : body.items()) {
      if (key != "trust_session")
        return ReplyError(res, common::InvalidRequest("unknown field '" + key + "'"));
      if (!value.is_boolean()) {
        return ReplyError(res, common::InvalidRequest("trust_session: expected true or false"));
      }
      trust = value.get<bool>();
    }
  }
  const std::string id = req.matches[1];
  auto record = store_->Load(id);
  if (!record.ok()) {
    return ReplyError(res, record.status().code() == Code::kNotFound ? record.status()
                                                                     : StoreError(record.status()));
  }
  auto out = dispatcher_->Approve(id, trust, "admin:" + std::to_string(caller->admin_index));
  if (!out.ok()) return ReplyError(res, StoreError(out.status()));
  switch (out->kind) {
    case ApproveOutcome::Kind::kMissing:
      return ReplyError(res, common::NotFound("no execution with id " + id));
    case ApproveOutcome::Kind::kNotAwaiting:
      return ReplyError(
          res, common::InvalidRequest("execution " + id + " is not awaiting approval (it is " +
                                      out->status + ")"));
    case ApproveOutcome::Kind::kSessionGone: {
      JobRecord ended = *record;
      ended.status = JobStatus::kCancelled;
      ended.error = JobError{"CANCELLED", "its session was deleted before approval", false, "", ""};
      ended.finished_ms = common::NowMs();
      (void)dispatcher_->EndJob(ended, FinishExpect::kAwaitingApproval);
      return Reply(res, 200, {{"id", id}, {"status", "cancelled"}});
    }
    default:
      break;
  }
  if (metrics_) metrics_->Approval(record->tenant, "approved");
  Reply(res, 200,
        {{"id", id},
         {"status", out->kind == ApproveOutcome::Kind::kStarted ? "running" : "queued"},
         {"trust_session", trust}});
}

void HttpApi::Deny(const httplib::Request& req, httplib::Response& res) {
  auto caller = Authenticate(req);
  if (!caller.ok()) return ReplyError(res, caller.status());
  if (!caller->admin) return ReplyError(res, Status(Code::kForbidden, "admin token required"));
  const std::string id = req.matches[1];
  auto record = store_->Load(id);
  if (!record.ok()) {
    return ReplyError(res, record.status().code() == Code::kNotFound ? record.status()
                                                                     : StoreError(record.status()));
  }
  if (record->status != JobStatus::kAwaitingApproval) {
    return ReplyError(
        res, common::InvalidRequest("execution " + id + " is not awaiting approval (it is " +
                                    JobStatusName(record->status) + ")"));
  }
  JobRecord ended = *record;
  ended.status = JobStatus::kRejected;
  ended.error = JobError{"APPROVAL_DENIED",
                         "denied by admin:" + std::to_string(caller->admin_index), false, "", ""};
  ended.finished_ms = common::NowMs();
  auto out = dispatcher_->EndJob(ended, FinishExpect::kAwaitingApproval);
  if (!out.ok()) return ReplyError(res, StoreError(out.status()));
  if (out->kind != FinishOutcome::Kind::kStored) {
    return ReplyError(
        res, common::InvalidRequest("execution " + id + " is no longer awaiting approval (it is " +
                                    out->status + ")"));
  }
  if (metrics_) metrics_->Approval(record->tenant, "denied");
  Reply(res, 200, ended.ToJson());
}

void HttpApi::ListApprovals(const httplib::Request& req, httplib::Response& res) {
  auto caller = Authenticate(req);
  if (!caller.ok()) return ReplyError(res, caller.status());
  if (!caller->admin) return ReplyError(res, Status(Code::kForbidden, "admin token required"));
  auto pending = schedule_->PendingApprovals(500);
  if (!pending.ok()) return ReplyError(res, StoreError(pending.status()));
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
  Reply(res, 200, {{"approvals", list}});
}

void HttpApi::ReadAudit(const httplib::Request& req, httplib::Response& res) {
  auto caller = Authenticate(req);
  if (!caller.ok()) return ReplyError(res, caller.status());
  if (!caller->admin) return ReplyError(res, Status(Code::kForbidden, "admin token required"));
  if (!governance_.audit) return ReplyError(res, common::NotFound("the audit trail is off"));
  size_t count = 500;
  if (req.has_param("count")) {
    auto c = req.get_param_value("count");
    auto [p, ec] = std::from_chars(c.data(), c.data() + c.size(), count);
    if (ec != std::errc() || p != c.data() + c.size() || count == 0 || count > 10000) {
      return ReplyError(res, common::InvalidRequest("count: 1-10000"));
    }
  }
  auto page = governance_.audit->Read(req.get_param_value("after"), count);
  if (!page.ok()) {
    return ReplyError(res, page.status().code() == Code::kInvalidRequest
                               ? page.status()
                               : StoreError(page.status()));
  }
  json entries = json::array();
  for (const auto& e : page->entries) entries.push_back(e.ToExportJson());
  Reply(res, 200,
        {{"entries", entries},
         {"anchor", page->anchor},
         {"head", page->head},
         {"next", page->entries.empty() ? json(nullptr) : json(page->entries.back().id)}});
}

void HttpApi::VerifyAudit(const httplib::Request& req, httplib::Response& res) {
  auto caller = Authenticate(req);
  if (!caller.ok()) return ReplyError(res, caller.status());
  if (!caller->admin) return ReplyError(res, Status(Code::kForbidden, "admin token required"));
  if (!governance_.audit) return ReplyError(res, common::NotFound("the audit trail is off"));
  auto report = governance_.audit->Verify();
  if (!report.ok()) return ReplyError(res, StoreError(report.status()));
  json body = {{"ok", !report->broken}, {"checked", report->checked}, {"broken", nullptr}};
  if (report->broken) {
    body["broken"] = {{"index", report->broken->index},
                      {"id", report->broken->id},
                      {"reason", report->broken->reason}};
  }
  Reply(res, 200, body);
}

void HttpApi::ListSessions(const httplib::Request& req, httplib::Response& res) {
  auto caller = Authenticate(req);
  if (!caller.ok()) return ReplyError(res, caller.status());
  std::string tenant = caller->tenant;
  if (caller->admin) {
    tenant = req.get_param_value("tenant");
    if (FindTenant(config_, tenant) == nullptr) {
      return ReplyError(res, common::InvalidRequest("admin: name a tenant with ?tenant="));
    }
  }
  auto list = sessions_->List(tenant, req.get_param_value("conversation_id"));
  if (!list.ok()) return ReplyError(res, StoreError(list.status()));
  json out = json::array();
  for (const auto& s : *list) out.push_back(s.ToJson());
  Reply(res, 200, {{"sessions", out}});
}

void HttpApi::DeleteSession(const httplib::Request& req, httplib::Response& res) {
  auto caller = Authenticate(req);
  if (!caller.ok()) return ReplyError(res, caller.status());
  if (caller->admin) {
    return ReplyError(res, Status(Code::kForbidden, "sessions are deleted with a tenant's token"));
  }
  const std::string sid = req.matches[1];
  auto deleted = sessions_->Delete(caller->tenant, sid);
  if (!deleted.ok()) {
    return ReplyError(res, deleted.status().code() == Code::kSessionNotFound
                               ? deleted.status()
                               : StoreError(deleted.status()));
  }
  json cancelled = json::array();
  for (const auto& id : deleted->queued_jobs) {
    auto record = store_->Load(id);
    if (!record.ok() || record->status != JobStatus::kQueued) continue;
    JobRecord ended = *record;
    ended.status = JobStatus::kCancelled;
    ended.error = JobError{"CANCELLED", "its session was deleted", false, "", ""};
    ended.queue_position.reset();
    ended.wait_reason.clear();
    ended.finished_ms = common::NowMs();
    if (dispatcher_->EndJob(ended, FinishExpect::kQueued).ok()) cancelled.push_back(id);
  }
  if (!deleted->running_job.empty()) {
    (void)schedule_->PublishCancel(deleted->running_job);
    cancelled.push_back(deleted->running_job);
  }
  // Its sandbox goes now (once a running execution has ended).
  if (!deleted->worker.empty()) dispatcher_->CloseSession(deleted->worker, sid);
  Reply(res, 200, {{"id", sid}, {"state", "deleted"}, {"cancelled", cancelled}});
}

void HttpApi::Capabilities(const httplib::Request& req, httplib::Response& res) {
  auto caller = Authenticate(req);
  if (!caller.ok()) return ReplyError(res, caller.status());
  Reply(res, 200,
        {{"tenant", caller->admin ? json(nullptr) : json(caller->tenant)},
         {"code_execution", !caller->admin && FindTenant(config_, caller->tenant)->enabled},
         {"auto_approve", !caller->admin && FindTenant(config_, caller->tenant)->auto_approve},
         {"runtimes", dispatcher_->Runtimes()}});
}

namespace {

std::string SseEvent(std::string_view event, std::string_view id, const json& data) {
  std::string out = "event: ";
  out.append(event);
  if (!id.empty()) {
    out += "\nid: ";
    out.append(id);
  }
  out += "\ndata: ";
  out += data.dump(-1, ' ', false, json::error_handler_t::replace);
  out += "\n\n";
  return out;
}

}  // namespace

void HttpApi::Events(const httplib::Request& req, httplib::Response& res) {
  auto record = LoadForCaller(req);
  if (!record.ok()) return ReplyError(res, record.status());
  struct Subscription {
    std::string id;
    std::string after = "0";  // last stream entry sent
    bool started = false;
    std::unique_ptr<RedisConnection> conn;  // its own: it blocks in XREAD
  };
  auto sub = std::make_shared<Subscription>();
  sub->id = record->id;
  sub->conn = RedisConnection::Lazy(redis_endpoint_);
  if (std::string last = req.get_header_value("Last-Event-ID"); !last.empty()) {
    // A reconnect: resume after the last chunk the client saw.
    sub->started = true;
    if (last != "start") sub->after = last;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider("text/event-stream", [this, sub](size_t,
                                                                    httplib::DataSink& sink) {
    auto fail = [&](const Status& st) {
      std::string e = SseEvent("execution_error", "", ErrorJson(st));
      sink.write(e.data(), e.size());
      sink.done();
      return true;
    };
    if (!sub->started) {
      sub->started = true;
      auto rec = store_->Load(sub->id);
      if (!rec.ok()) return fail(StoreError(rec.status()));
      std::string e = SseEvent("execution_start", "start",
                               {{"id", rec->id},
                                {"language", rec->language},
                                {"session_id", rec->session_id},
                                {"status", JobStatusName(rec->status)}});
      return sink.write(e.data(), e.size());
    }
    // Whether the job had ended before this read: then the read drains
    // every chunk there will ever be, and the end event follows.
    auto rec = store_->Load(sub->id);
    if (!rec.ok()) return fail(StoreError(rec.status()));
    const bool ended = IsTerminal(rec->status);
    auto chunks = JobStore::ReadChunks(sub->conn.get(), sub->id, sub->after,
                                       ended ? -1 : static_cast<int>(kSsePoll.count()));
    if (!chunks.ok()) return fail(StoreError(chunks.status()));
    std::string out;
    for (const auto& c : *chunks) {
      out += SseEvent(
          "output_chunk", c.event_id,
          {{"stream", c.chunk.stream == common::protocol::Stream::kStdout ? "stdout" : "stderr"},
           {"seq", c.chunk.seq},
           {"data", c.chunk.data}});
      sub->after = c.event_id;
    }
    if (ended && chunks->empty()) {
      const bool error = rec->status == JobStatus::kError || rec->status == JobStatus::kRejected;
      out += SseEvent(error ? "execution_error" : "execution_end", "end", rec->ToJson());
      sink.write(out.data(), out.size());
      sink.done();
      return true;
    }
    if (out.empty()) out = ": waiting\n\n";  // a comment: finds clients that left
    return sink.write(out.data(), out.size());
  });
}

void HttpApi::Get(const httplib::Request& req, httplib::Response& res) {
  auto record = LoadForCaller(req);
  if (!record.ok()) return ReplyError(res, record.status());
  Reply(res, 200, record->ToJson());
}

void HttpApi::ListWorkers(const httplib::Request& req, httplib::Response& res) {
  auto caller = Authenticate(req);
  if (!caller.ok()) return ReplyError(res, caller.status());
  if (!caller->admin) return ReplyError(res, Status(Code::kForbidden, "admin token required"));
  json workers = json::array();
  for (const auto& w : dispatcher_->Workers()) {
    workers.push_back({{"id", w.id},
                       {"hostname", w.hostname},
                       {"runtimes", w.runtimes},
                       {"sandbox_layers", w.sandbox_layers},
                       {"slots", w.slots},
                       {"running", w.running},
                       {"load", w.slots ? static_cast<double>(w.running) / w.slots : 0.0},
                       {"draining", w.draining},
                       {"registered_at_ms", w.registered_at_ms},
                       {"last_heartbeat_ms", w.last_heartbeat_ms},
                       {"metrics_endpoint", w.metrics_endpoint}});
  }
  Reply(res, 200, {{"workers", workers}});
}

Status HttpApi::StoreError(const Status& st) const {
  if (metrics_) metrics_->RedisError();
  return Status(Code::kUnavailable, st.message());
}

void HttpApi::Metrics(const httplib::Request&, httplib::Response& res) {
  if (!metrics_) return ReplyError(res, common::NotFound("metrics are off"));
  res.set_content(metrics_->Render(), "text/plain; version=0.0.4");
}

void HttpApi::Health(const httplib::Request&, httplib::Response& res) {
  auto st = store_->Ping();
  if (!st.ok() && metrics_) metrics_->RedisError();
  json body = {{"status", st.ok() ? "ok" : "unavailable"},
               {"redis", st.ok() ? "ok" : st.message()},
               {"workers", dispatcher_->Workers().size()},
               {"queued", dispatcher_->QueueDepth()}};  // every tenant's, as of the last tick
  Reply(res, st.ok() ? 200 : 503, body);
}

}  // namespace kiln::broker
