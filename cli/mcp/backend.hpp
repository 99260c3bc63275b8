// Backend: what the MCP server needs from a Kiln cluster — a narrow slice of
// the HTTP API, so the server's dispatch can be unit-tested with a fake.
//
//   ApiBackend backend(config);                  // cli/mcp/api_backend.hpp
//   auto server = McpServer::Create(&backend, {});
//
// Each call returns the decoded JSON body of a 2xx answer or the API's error
// as a Status (as ApiClient does). Implementations must allow calls from
// several threads at once: the stdio loop runs tool calls in parallel.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.hpp"

namespace kiln::cli::mcp {

class Backend {
 public:
  Backend() = default;
  virtual ~Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;
  Backend(Backend&&) = delete;
  Backend& operator=(Backend&&) = delete;

  // POST /v1/executions; `read_timeout` covers the wait of a `wait: true`
  // submit; a non-empty `idempotency_key` is sent as Idempotency-Key.
  virtual common::StatusOr<nlohmann::json> Submit(const nlohmann::json& body,
                                                  std::chrono::seconds read_timeout,
                                                  const std::string& idempotency_key) = 0;
  // POST /v1/executions/{id}/cancel.
  virtual common::StatusOr<nlohmann::json> Cancel(const std::string& execution_id) = 0;
  // GET /v1/sessions[?conversation_id=X] (empty: all the caller's sessions).
  virtual common::StatusOr<nlohmann::json> ListSessions(const std::string& conversation_id) = 0;
  // DELETE /v1/sessions/{id}.
  virtual common::StatusOr<nlohmann::json> DeleteSession(const std::string& session_id) = 0;
  // GET /v1/capabilities.
  virtual common::StatusOr<nlohmann::json> Capabilities() = 0;
};

}  // namespace kiln::cli::mcp
