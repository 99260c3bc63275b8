// ApiClient: a small typed client for the broker's HTTP/JSON API (docs/api.md).
//
//   ASSIGN_OR_RETURN(auto client, ApiClient::Create(config));
//   ASSIGN_OR_RETURN(nlohmann::json record, client->GetExecution("ex_..."));
//
// Each call returns the decoded JSON body of a 2xx answer, or a Status: an API
// error answer becomes its own code and message ({"error": {"code", ...}});
// a network failure or an answer without an error object becomes UNAVAILABLE
// (5xx, no answer) or INVALID_REQUEST (other 4xx). The client holds one
// keep-alive connection; one thread at a time (the MCP server makes one per
// call).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli/client_config.hpp"
#include "cli/sse_parser.hpp"
#include "common/status.hpp"

namespace httplib {
class Client;
}  // namespace httplib

namespace kiln::cli {

// "scheme://host[:port]" and an optional path prefix ("/kiln" behind a proxy).
struct BaseUrl {
  std::string scheme_host_port;
  std::string path_prefix;
};
common::StatusOr<BaseUrl> ParseBaseUrl(const std::string& url);

// The Status an HTTP answer stands for (OK for 2xx). Pure; exposed for tests.
common::Status StatusFromHttp(int http_status, const std::string& body);

// The API code named `name` ("QUEUE_FULL"), or nullopt for a name this client
// does not know.
std::optional<common::Code> CodeFromName(const std::string& name);

// Whether `id` can go into a URL path as is: 1..128 of [A-Za-z0-9_.-].
bool IsPlainId(const std::string& id);

// Whether `id` is a session or conversation id the broker accepts:
// 1..128 of [A-Za-z0-9._:-] (safe in a URL path as is).
bool IsSessionId(const std::string& id);

// `value` percent-encoded for a URL query (RFC 3986 unreserved kept).
std::string QueryEscape(const std::string& value);

class ApiClient {
 public:
  // Fails only on a malformed URL.
  static common::StatusOr<std::unique_ptr<ApiClient>> Create(const ClientConfig& config);
  ~ApiClient();
  ApiClient(const ApiClient&) = delete;
  ApiClient& operator=(const ApiClient&) = delete;

  struct SubmitOptions {
    std::string idempotency_key;  // empty: none
    // How long to wait for the answer: a `wait: true` submit answers only when
    // the job ends, so this must cover the job's timeout.
    std::chrono::seconds read_timeout{330};
  };
  // POST /v1/executions: the record (wait: true) or {"id", "status"} (wait: false).
  common::StatusOr<nlohmann::json> Submit(const nlohmann::json& body, const SubmitOptions& options);
  // GET /v1/executions/{id}: the record.
  common::StatusOr<nlohmann::json> GetExecution(const std::string& id);
  // GET /v1/workers (admin): {"workers": [...]}.
  common::StatusOr<nlohmann::json> ListWorkers();
  // GET /v1/health: the body, for 200 and 503 alike; `*healthy` tells them apart.
  common::StatusOr<nlohmann::json> Health(bool* healthy);
  // POST /v1/executions/{id}/cancel: the record (terminal) or {"id", "status"}.
  common::StatusOr<nlohmann::json> Cancel(const std::string& id);
  // POST /v1/executions/{id}/approve {"trust_session": b} (admin).
  common::StatusOr<nlohmann::json> Approve(const std::string& id, bool trust_session);
  // POST /v1/executions/{id}/deny (admin).
  common::StatusOr<nlohmann::json> Deny(const std::string& id);
  // GET /v1/approvals (admin): {"approvals": [...]}.
  common::StatusOr<nlohmann::json> ListApprovals();
  // GET /v1/sessions[?conversation_id=X]: {"sessions": [...]}; empty: all.
  common::StatusOr<nlohmann::json> ListSessions(const std::string& conversation_id);
  // DELETE /v1/sessions/{id}: {"id", "state": "deleted"}.
  common::StatusOr<nlohmann::json> DeleteSession(const std::string& id);
  // GET /v1/capabilities: {"code_execution": bool, "runtimes": [...]}.
  common::StatusOr<nlohmann::json> Capabilities();
  // GET /v1/audit (admin): up to `count` entries after stream id `after`
  // ("" from the first kept one), with the chain's anchor and head.
  common::StatusOr<nlohmann::json> ReadAudit(const std::string& after, size_t count);

  // GET /v1/executions/{id}/events: calls `on_event` for each event as it
  // arrives (resuming after `last_event_id` when not empty) until the broker
  // closes the stream, `on_event` returns false, or no byte arrives for
  // `idle_timeout` (the broker sends a keep-alive every 250 ms). OK when the
  // stream ended for either of the first two reasons; UNAVAILABLE when the
  // connection broke; the API's error when the broker refused the request.
  using EventHandler = std::function<bool(const SseEvent&)>;
  common::Status StreamEvents(const std::string& id, const std::string& last_event_id,
                              const EventHandler& on_event,
                              std::chrono::seconds idle_timeout = std::chrono::seconds(30));

  const std::string& url() const { return url_; }

 private:
  struct Reply {
    int status = 0;
    std::string body;
  };
  ApiClient(std::string url, BaseUrl base, std::string token);
  common::StatusOr<Reply> Send(const std::string& method, const std::string& path,
                               const std::string* body, const std::string& idempotency_key,
                               std::chrono::seconds read_timeout);
  // POST /v1/executions/{id}/<action> with `body`.
  common::StatusOr<nlohmann::json> PostAction(const std::string& id, const std::string& action,
                                              const std::string& body);
  common::StatusOr<nlohmann::json> Decode(const Reply& reply) const;

  std::string url_;
  BaseUrl base_;
  std::string token_;
  std::unique_ptr<httplib::Client> http_;
};

}  // namespace kiln::cli
