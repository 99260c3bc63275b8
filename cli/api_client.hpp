// ApiClient: a small typed client for the broker's HTTP/JSON API (docs/api.md).
//
//   ASSIGN_OR_RETURN(auto client, ApiClient::Create(config));
//   ASSIGN_OR_RETURN(nlohmann::json record, client->GetExecution("ex_..."));
//
// Each call returns the decoded JSON body of a 2xx answer, or a Status: an API
// error answer becomes its own code and message ({"error": {"code", ...}});
// a network failure or an answer without an error object becomes UNAVAILABLE
// (5xx, no answer) or INVALID_REQUEST (other 4xx). The client holds one
// keep-alive connection; one thread at a time.
#pragma once

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli/client_config.hpp"
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
  common::StatusOr<nlohmann::json> Decode(const Reply& reply) const;

  std::string url_;
  BaseUrl base_;
  std::string token_;
  std::unique_ptr<httplib::Client> http_;
};

}  // namespace kiln::cli
