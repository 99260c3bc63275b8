#include "cli/mcp/api_backend.hpp"

#include "cli/api_client.hpp"

namespace kiln::cli::mcp {

using common::StatusOr;
using nlohmann::json;

StatusOr<json> ApiBackend::Submit(const json& body, std::chrono::seconds read_timeout,
                                  const std::string& idempotency_key) {
  ASSIGN_OR_RETURN(auto client, ApiClient::Create(config_));
  ApiClient::SubmitOptions options;
  options.read_timeout = read_timeout;
  options.idempotency_key = idempotency_key;
  return client->Submit(body, options);
}

StatusOr<json> ApiBackend::Cancel(const std::string& execution_id) {
  ASSIGN_OR_RETURN(auto client, ApiClient::Create(config_));
  return client->Cancel(execution_id);
}

StatusOr<json> ApiBackend::ListSessions(const std::string& conversation_id) {
  ASSIGN_OR_RETURN(auto client, ApiClient::Create(config_));
  return client->ListSessions(conversation_id);
}

StatusOr<json> ApiBackend::DeleteSession(const std::string& session_id) {
  ASSIGN_OR_RETURN(auto client, ApiClient::Create(config_));
  return client->DeleteSession(session_id);
}

StatusOr<json> ApiBackend::Capabilities() {
  ASSIGN_OR_RETURN(auto client, ApiClient::Create(config_));
  return client->Capabilities();
}

}  // namespace kiln::cli::mcp
