// ApiBackend: the MCP server's Backend over the broker's HTTP API (ApiClient).
//
//   ASSIGN_OR_RETURN(ClientConfig config, LoadClientConfig(flags, TokenRole::kTenant, env));
//   ApiBackend backend(config);
//
// Each call builds its own ApiClient (one short-lived connection), so calls
// from several threads never share a connection. Any thread.
#pragma once

#include "cli/client_config.hpp"
#include "cli/mcp/backend.hpp"

namespace kiln::cli::mcp {

class ApiBackend final : public Backend {
 public:
  explicit ApiBackend(ClientConfig config) : config_(std::move(config)) {}

  common::StatusOr<nlohmann::json> Submit(const nlohmann::json& body,
                                          std::chrono::seconds read_timeout,
                                          const std::string& idempotency_key) override;
  common::StatusOr<nlohmann::json> Cancel(const std::string& execution_id) override;
  common::StatusOr<nlohmann::json> ListSessions(const std::string& conversation_id) override;
  common::StatusOr<nlohmann::json> DeleteSession(const std::string& session_id) override;
  common::StatusOr<nlohmann::json> Capabilities() override;

 private:
  const ClientConfig config_;
};

}  // namespace kiln::cli::mcp
