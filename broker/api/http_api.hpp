// HttpApi: the broker's HTTP/JSON API (docs/api.md) on HttpServer — the
// route table, authentication, per-tenant quotas, request parsing and the
// handlers, which leave every rule about executions and sessions to
// ExecutionService (shared with the native API) and map its errors to HTTP.
//
//   ASSIGN_OR_RETURN(auto api, HttpApi::Create(config, deps));
//   api->Start();   // serves until Stop()
//
// How a request is served (docs/security.md, "Hostile clients"):
//  1. HttpServer reads it within its deadlines and size limits;
//  2. the route table finds the handler (404; 405 with Allow);
//  3. the token is checked (401, 403) and, on the reserve lane, only health
//     and metrics are served (503);
//  4. handlers that call Redis run on a bounded WorkPool (`broker.http.threads`;
//     a full queue answers 503), at most `max_requests` per tenant at once
//     (429); health, metrics, capabilities and workers answer on the I/O
//     thread from memory, so they answer while Redis or the pool is stuck;
//  5. a `wait: true` submit and a cancel wait for the job's end without a
//     thread (JobWaiters watch + timers), at most `max_waits` per tenant; an
//     event stream is an EventStream fed by the OutputFollower, at most
//     `max_streams` per tenant;
//  6. GET /v1/ws upgrades to the WebSocket channel (WsSession), at most
//     `max_websockets` connections per tenant.
// Every error answers with the API's error object and code; 429 and 503
// carry Retry-After.
// Create() and Start()/Stop() from one thread; handlers run on I/O and pool threads.
#pragma once

#include <memory>
#include <string>

#include "broker/config.hpp"
#include "broker/http/http_server.hpp"
#include "broker/http/quota_counter.hpp"
#include "broker/http/route_table.hpp"
#include "broker/http/work_pool.hpp"
#include "broker/scheduler/dispatcher.hpp"
#include "broker/scheduler/job_waiters.hpp"
#include "broker/service/execution_service.hpp"
#include "broker/store/redis_probe.hpp"
#include "broker/stream/output_follower.hpp"
#include "broker/stream/unread_budget.hpp"
#include "common/status.hpp"

namespace kiln::broker {

class BrokerMetrics;
class ToolRelay;

struct HttpApiDeps {
  ExecutionService* service = nullptr;  // every rule about executions and sessions
  Dispatcher* dispatcher = nullptr;     // workers, runtimes, queue depth (from memory)
  JobWaiters* waiters = nullptr;
  OutputFollower* follower = nullptr;
  UnreadBudget* unread = nullptr;
  RedisProbe* probe = nullptr;
  BrokerMetrics* metrics = nullptr;  // optional
  ToolRelay* tools = nullptr;        // tool answers (without it: 503)
};

class HttpApi {
 public:
  static common::StatusOr<std::unique_ptr<HttpApi>> Create(const BrokerConfig& config,
                                                           HttpApiDeps deps);
  ~HttpApi();
  HttpApi(const HttpApi&) = delete;
  HttpApi& operator=(const HttpApi&) = delete;

  int port() const { return server_->port(); }
  void Start() { server_->Start(); }
  void Stop();
  size_t connections() const { return server_->connections(); }
  // The routes served (for the docs test and the route list).
  const RouteTable& routes() const { return routes_; }
  // The same table without a broker: what `kiln-broker --routes` prints,
  // which the OpenAPI test compares with docs/openapi.yaml.
  static std::vector<RouteSpec> RouteSpecs();

  struct Call;     // one request being handled
  struct Waiting;  // a wait for a job's end
  using Handler = void (HttpApi::*)(Call& call);

 private:
  HttpApi(const BrokerConfig& config, HttpApiDeps deps);
  // The route table: one line per route (method, path, metrics label, who,
  // blocking) and its handler.
  static std::vector<std::pair<RouteSpec, Handler>> Table();

  void Handle(std::shared_ptr<HttpExchange> ex);
  void Observe(const HttpRequest* req, int status, size_t bytes);
  common::StatusOr<Caller> Authenticate(const HttpRequest& req) const;

  // Answers `ex` with the job's terminal record when it ends (or with the
  // record as it is at `deadline`); `blocking` is a JobWaiters handle taken
  // before the job existed, when there is one.
  void AwaitEnd(std::shared_ptr<HttpExchange> ex, const std::string& id,
                std::chrono::steady_clock::time_point deadline, JobWaiters::Handle blocking,
                QuotaCounter::Hold hold, bool cancel, HttpHeaders headers = {});
  void Recheck(const std::shared_ptr<Waiting>& w, std::chrono::milliseconds delay);
  // Runs `fn` on the work pool, or here when it is full.
  void OnPool(std::function<void()> fn);

  void Submit(Call& call);
  void Get(Call& call);
  // 200 with the record, charged; 429 RATE_LIMITED when refused.
  void ReplyRecord(Call& call, const JobRecord& record);
  void Events(Call& call);
  void Cancel(Call& call);
  void ToolResults(Call& call);
  // GET /v1/ws: the WebSocket channel (WsSession).
  void WebSocket(Call& call);
  void Approve(Call& call);
  void Deny(Call& call);
  void ListApprovals(Call& call);
  void ReadAudit(Call& call);
  void VerifyAudit(Call& call);
  void SubmitBatch(Call& call);
  void ListExecutions(Call& call);
  void Usage(Call& call);
  void ListSessions(Call& call);
  void DeleteSession(Call& call);
  void Capabilities(Call& call);
  void Runtimes(Call& call);
  // GET /v1/runtimes' body for this caller: live workers of its tenant's
  // isolation level (every level for an admin token), merged.
  nlohmann::json RuntimesOffered(const Caller& caller) const;
  void ListWorkers(Call& call);
  void Health(Call& call);
  void Metrics(Call& call);

  const BrokerConfig& config_;
  HttpApiDeps deps_;
  ExecutionService* service_;
  RouteTable routes_;
  std::vector<Handler> handlers_;  // by route index
  QuotaCounter requests_;          // per tenant: requests on the pool
  QuotaCounter waits_;             // per tenant: waits (submit, cancel)
  QuotaCounter streams_;           // per tenant: event streams (SSE and WebSocket follows)
  QuotaCounter websockets_;        // per tenant: WebSocket connections
  std::unique_ptr<WorkPool> pool_;
  std::unique_ptr<HttpServer> server_;
};

}  // namespace kiln::broker
