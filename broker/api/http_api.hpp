// HttpApi: the broker's HTTP/JSON front end (docs/api.md) on cpp-httplib.
//
//   ASSIGN_OR_RETURN(auto api, HttpApi::Create(config, stores, &dispatcher, &waiters));
//   std::jthread t([&] { api->Serve(); });   // until Stop()
//
// Routes: POST /v1/executions (with Idempotency-Key), GET /v1/executions/{id},
// GET /v1/executions/{id}/events (SSE), POST /v1/executions/{id}/cancel,
// GET /v1/sessions, DELETE /v1/sessions/{id}, GET /v1/capabilities,
// POST /v1/executions/{id}/approve|deny, GET /v1/approvals, GET /v1/audit,
// GET /v1/audit/verify (admin),
// GET /v1/workers (admin), GET /v1/health, GET /metrics (Prometheus, no
// auth; counted in `metrics`, which may be null). An event stream holds one HTTP
// thread and one Redis connection while it is open. Every error answers with the API's error object
// and code. Requests run on a pool of config.http_threads threads; a
// `wait: true` submit holds its thread until the job ends (or its timeout plus
// wait_grace_ms passes, then it answers with the current record).
// Serve() blocks in the calling thread; Stop() may be called from any thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "broker/api/submit_service.hpp"
#include "broker/config.hpp"
#include "broker/policy/policy.hpp"
#include "broker/scheduler/audit_writer.hpp"
#include "broker/scheduler/dispatcher.hpp"
#include "broker/scheduler/job_waiters.hpp"
#include "broker/store/audit_store.hpp"
#include "broker/store/job_store.hpp"
#include "common/status.hpp"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace kiln::broker {

class BrokerMetrics;

class HttpApi {
 public:
  static common::StatusOr<std::unique_ptr<HttpApi>> Create(
      const BrokerConfig& config, DispatcherStores stores, Dispatcher* dispatcher,
      JobWaiters* waiters, BrokerMetrics* metrics = nullptr, Governance governance = {});
  ~HttpApi();
  HttpApi(const HttpApi&) = delete;
  HttpApi& operator=(const HttpApi&) = delete;

  int port() const { return port_; }
  void Serve();
  void Stop();

 private:
  HttpApi(const BrokerConfig& config, DispatcherStores stores, Dispatcher* dispatcher,
          JobWaiters* waiters, BrokerMetrics* metrics, Governance governance);
  void Routes();
  common::StatusOr<Caller> Authenticate(const httplib::Request& req) const;
  void Submit(const httplib::Request& req, httplib::Response& res);
  // The job named by the route's first match, if the caller may see it
  // (another tenant's job answers NOT_FOUND, like a missing one).
  common::StatusOr<JobRecord> LoadForCaller(const httplib::Request& req) const;
  void Get(const httplib::Request& req, httplib::Response& res);
  void Cancel(const httplib::Request& req, httplib::Response& res);
  // Server-Sent Events: execution_start, output_chunk*, then execution_end
  // (or execution_error). Replays stored chunks first; Last-Event-ID resumes.
  void Events(const httplib::Request& req, httplib::Response& res);
  // The record of an existing job (wait: until it ends or the deadline),
  // or 202 {id, status} when not waiting.
  void ReplyWithJob(httplib::Response& res, const std::string& id, bool wait,
                    std::chrono::steady_clock::time_point deadline);
  // Waits for the job's terminal record until the deadline: woken by this
  // broker's dispatcher or (through the EventBus) another broker's, and
  // re-reading Redis every second in case a notice was lost.
  common::StatusOr<JobRecord> AwaitEnd(JobWaiters::Handle handle, const std::string& id,
                                       std::chrono::steady_clock::time_point deadline);
  void Approve(const httplib::Request& req, httplib::Response& res);
  void Deny(const httplib::Request& req, httplib::Response& res);
  void ListApprovals(const httplib::Request& req, httplib::Response& res);
  void ReadAudit(const httplib::Request& req, httplib::Response& res);
  void VerifyAudit(const httplib::Request& req, httplib::Response& res);
  void ListSessions(const httplib::Request& req, httplib::Response& res);
  void DeleteSession(const httplib::Request& req, httplib::Response& res);
  void Capabilities(const httplib::Request& req, httplib::Response& res);
  void ListWorkers(const httplib::Request& req, httplib::Response& res);
  void Health(const httplib::Request& req, httplib::Response& res);
  void Metrics(const httplib::Request& req, httplib::Response& res);
  // UNAVAILABLE for a failed store call, counted as a Redis error.
  common::Status StoreError(const common::Status& st) const;

  const BrokerConfig& config_;
  JobStore* store_;
  ScheduleStore* schedule_;
  SessionStore* sessions_;
  Dispatcher* dispatcher_;
  JobWaiters* waiters_;
  BrokerMetrics* metrics_;
  Governance governance_;
  SubmitService submits_;  // the checks and scheduling shared with the native API
  std::unique_ptr<httplib::Server> server_;
  RedisEndpoint redis_endpoint_;  // event streams open their own connections
  int port_ = 0;
};

}  // namespace kiln::broker
