#include "cli/api_client.hpp"

#include <httplib.h>

#include "common/json/bounded_json.hpp"

namespace kiln::cli {
namespace {

using common::Code;
using common::Status;
using common::StatusOr;
using nlohmann::json;

constexpr std::chrono::seconds kConnectTimeout{10};
constexpr std::chrono::seconds kWriteTimeout{60};
constexpr std::chrono::seconds kDefaultReadTimeout{60};
constexpr size_t kMaxBodyInMessage = 200;
constexpr size_t kMaxErrorBodyBytes = size_t{64} * 1024;  // kept of a refused event stream

std::string NetworkError(httplib::Error err) {
  switch (err) {
    case httplib::Error::Connection:
      return "cannot connect";
    case httplib::Error::ConnectionTimeout:
      return "connection timed out";
    case httplib::Error::Read:
      return "no answer (read failed or timed out)";
    case httplib::Error::Write:
      return "sending the request failed";
    case httplib::Error::SSLConnection:
      return "TLS connection failed";
    case httplib::Error::SSLServerVerification:
      return "TLS certificate verification failed";
    default:
      return httplib::to_string(err);
  }
}

}  // namespace

bool IsPlainId(const std::string& id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

bool IsSessionId(const std::string& id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.' || c == ':';
    if (!ok) return false;
  }
  return true;
}

std::string QueryEscape(const std::string& value) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : value) {
    bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '-' || c == '.' || c == '_' || c == '~';
    if (keep) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::optional<Code> CodeFromName(const std::string& name) {
  for (int i = static_cast<int>(Code::kOk); i <= static_cast<int>(Code::kInternal); ++i) {
    auto code = static_cast<Code>(i);
    if (common::CodeName(code) == name) return code;
  }
  return std::nullopt;
}

StatusOr<BaseUrl> ParseBaseUrl(const std::string& url) {
  auto scheme_end = url.find("://");
  if (scheme_end == std::string::npos) {
    return common::InvalidRequest("broker url '" + url + "' must start with http:// or https://");
  }
  const std::string scheme = url.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https") {
    return common::InvalidRequest("broker url '" + url + "': unsupported scheme " + scheme);
  }
  auto path_start = url.find('/', scheme_end + 3);
  BaseUrl base;
  base.scheme_host_port = url.substr(0, path_start);
  if (base.scheme_host_port.size() == scheme_end + 3) {
    return common::InvalidRequest("broker url '" + url + "' has no host");
  }
  if (path_start != std::string::npos) {
    base.path_prefix = url.substr(path_start);
    while (!base.path_prefix.empty() && base.path_prefix.back() == '/') {
      base.path_prefix.pop_back();
    }
  }
  return base;
}

Status StatusFromHttp(int http_status, const std::string& body) {
  if (http_status >= 200 && http_status < 300) return Status::Ok();
  json j = common::ParseJson(body).value_or(json());
  if (j.is_object() && j.contains("error") && j["error"].is_object()) {
    const json& e = j["error"];
    std::string name = e.value("code", "");
    std::string message = e.value("message", "");
    if (auto code = CodeFromName(name); code && *code != Code::kOk) return {*code, message};
    // A code newer than this client: keep its name in the message.
    Code fallback = http_status >= 500 ? Code::kUnavailable : Code::kInvalidRequest;
    return {fallback, name + ": " + message};
  }
  std::string snippet = body.substr(0, kMaxBodyInMessage);
  while (!snippet.empty() && (snippet.back() == '\n' || snippet.back() == '\r')) {
    snippet.pop_back();
  }
  std::string message = "HTTP " + std::to_string(http_status);
  if (!snippet.empty()) message += ": " + snippet;
  if (http_status == 429) return {Code::kQueueFull, message};
  if (http_status == 401) return {Code::kUnauthorized, message};
  if (http_status == 403) return {Code::kForbidden, message};
  if (http_status == 404) return {Code::kNotFound, message};
  if (http_status >= 400 && http_status < 500) return {Code::kInvalidRequest, message};
  return {Code::kUnavailable, message};
}

StatusOr<std::unique_ptr<ApiClient>> ApiClient::Create(const ClientConfig& config) {
  ASSIGN_OR_RETURN(BaseUrl base, ParseBaseUrl(config.url));
  std::unique_ptr<ApiClient> client(new ApiClient(config.url, base, config.token));
  if (!client->http_->is_valid()) {
    return common::InvalidRequest("broker url '" + config.url + "' is not valid");
  }
  return client;
}

ApiClient::ApiClient(std::string url, BaseUrl base, std::string token)
    : url_(std::move(url)),
      base_(std::move(base)),
      token_(std::move(token)),
      http_(std::make_unique<httplib::Client>(base_.scheme_host_port)) {
  http_->set_connection_timeout(kConnectTimeout);
  http_->set_write_timeout(kWriteTimeout);
  http_->set_keep_alive(true);
  // httplib sends a POST's headers and body apart: without this, the body
  // waits for the broker's delayed ACK (up to 40 ms) on a kept-alive connection.
  http_->set_tcp_nodelay(true);
}

ApiClient::~ApiClient() = default;

StatusOr<ApiClient::Reply> ApiClient::Send(const std::string& method, const std::string& path,
                                           const std::string* body,
                                           const std::string& idempotency_key,
                                           std::chrono::seconds read_timeout) {
  httplib::Headers headers = {{"User-Agent", "kiln-cli/" KILN_VERSION},
                              {"Accept", "application/json"}};
  if (!token_.empty()) headers.emplace("Authorization", "Bearer " + token_);
  if (!idempotency_key.empty()) headers.emplace("Idempotency-Key", idempotency_key);
  http_->set_read_timeout(read_timeout);
  const std::string full_path = base_.path_prefix + path;
  httplib::Result res =
      method == "POST"
          ? http_->Post(full_path, headers, body ? *body : std::string(), "application/json")
      : method == "DELETE" ? http_->Delete(full_path, headers)
                           : http_->Get(full_path, headers);
  if (!res) {
    return common::Unavailable(method + " " + url_ + path + ": " + NetworkError(res.error()));
  }
  return Reply{res->status, res->body};
}

StatusOr<json> ApiClient::Decode(const Reply& reply) const {
  RETURN_IF_ERROR(StatusFromHttp(reply.status, reply.body));
  json j = common::ParseJson(reply.body).value_or(json());
  if (!j.is_object()) {
    return common::Unavailable("the broker at " + url_ +
                               " answered with something other than a JSON object");
  }
  return j;
}

StatusOr<json> ApiClient::Submit(const json& body, const SubmitOptions& options) {
  const std::string text = body.dump();
  ASSIGN_OR_RETURN(Reply reply, Send("POST", "/v1/executions", &text, options.idempotency_key,
                                     options.read_timeout));
  return Decode(reply);
}

StatusOr<json> ApiClient::GetExecution(const std::string& id) {
  if (!IsPlainId(id)) {
    return common::InvalidRequest("'" + id + "' is not an execution id (expected e.g. ex_...)");
  }
  ASSIGN_OR_RETURN(Reply reply,
                   Send("GET", "/v1/executions/" + id, nullptr, "", kDefaultReadTimeout));
  return Decode(reply);
}

StatusOr<json> ApiClient::ListWorkers() {
  ASSIGN_OR_RETURN(Reply reply, Send("GET", "/v1/workers", nullptr, "", kDefaultReadTimeout));
  return Decode(reply);
}

StatusOr<json> ApiClient::Health(bool* healthy) {
  ASSIGN_OR_RETURN(Reply reply, Send("GET", "/v1/health", nullptr, "", kDefaultReadTimeout));
  *healthy = reply.status == 200;
  if (reply.status == 503) {
    json j = common::ParseJson(reply.body).value_or(json());
    if (j.is_object() && !j.contains("error")) return j;
  }
  return Decode(reply);
}

StatusOr<json> ApiClient::PostAction(const std::string& id, const std::string& action,
                                     const std::string& body) {
  if (!IsPlainId(id)) {
    return common::InvalidRequest("'" + id + "' is not an execution id (expected e.g. ex_...)");
  }
  ASSIGN_OR_RETURN(Reply reply, Send("POST", "/v1/executions/" + id + "/" + action, &body, "",
                                     kDefaultReadTimeout));
  return Decode(reply);
}

StatusOr<json> ApiClient::Cancel(const std::string& id) { return PostAction(id, "cancel", "{}"); }

StatusOr<json> ApiClient::Approve(const std::string& id, bool trust_session) {
  return PostAction(id, "approve", json{{"trust_session", trust_session}}.dump());
}

StatusOr<json> ApiClient::Deny(const std::string& id) { return PostAction(id, "deny", "{}"); }

StatusOr<json> ApiClient::ListApprovals() {
  ASSIGN_OR_RETURN(Reply reply, Send("GET", "/v1/approvals", nullptr, "", kDefaultReadTimeout));
  return Decode(reply);
}

StatusOr<json> ApiClient::ListSessions(const std::string& conversation_id) {
  std::string path = "/v1/sessions";
  if (!conversation_id.empty()) path += "?conversation_id=" + QueryEscape(conversation_id);
  ASSIGN_OR_RETURN(Reply reply, Send("GET", path, nullptr, "", kDefaultReadTimeout));
  return Decode(reply);
}

StatusOr<json> ApiClient::DeleteSession(const std::string& id) {
  if (!IsSessionId(id)) {
    return common::InvalidRequest("'" + id +
                                  "' is not a session id (1-128 of A-Z a-z 0-9 . _ : -)");
  }
  ASSIGN_OR_RETURN(Reply reply,
                   Send("DELETE", "/v1/sessions/" + id, nullptr, "", kDefaultReadTimeout));
  return Decode(reply);
}

StatusOr<json> ApiClient::ReadAudit(const std::string& after, size_t count) {
  std::string path = "/v1/audit?count=" + std::to_string(count);
  if (!after.empty()) path += "&after=" + QueryEscape(after);
  ASSIGN_OR_RETURN(Reply reply, Send("GET", path, nullptr, "", kDefaultReadTimeout));
  return Decode(reply);
}

StatusOr<json> ApiClient::Capabilities() {
  ASSIGN_OR_RETURN(Reply reply, Send("GET", "/v1/capabilities", nullptr, "", kDefaultReadTimeout));
  return Decode(reply);
}

Status ApiClient::StreamEvents(const std::string& id, const std::string& last_event_id,
                               const EventHandler& on_event, std::chrono::seconds idle_timeout) {
  if (!IsPlainId(id)) {
    return common::InvalidRequest("'" + id + "' is not an execution id (expected e.g. ex_...)");
  }
  const std::string path = "/v1/executions/" + id + "/events";
  httplib::Headers headers = {{"User-Agent", "kiln-cli/" KILN_VERSION},
                              {"Accept", "text/event-stream"}};
  if (!token_.empty()) headers.emplace("Authorization", "Bearer " + token_);
  if (!last_event_id.empty()) headers.emplace("Last-Event-ID", last_event_id);
  // Its own connection: a stream is not reused for other requests.
  httplib::Client http(base_.scheme_host_port);
  http.set_connection_timeout(kConnectTimeout);
  http.set_tcp_nodelay(true);
  http.set_read_timeout(idle_timeout);
  int http_status = 0;
  std::string error_body;  // the body of a non-200 answer
  SseParser parser;
  Status parse_error;
  bool stopped = false;  // on_event asked to stop
  httplib::Result res = http.Get(
      base_.path_prefix + path, headers,
      [&](const httplib::Response& r) {
        http_status = r.status;
        return true;
      },
      [&](const char* data, size_t length) {
        if (http_status != 200) {
          if (error_body.size() < kMaxErrorBodyBytes) error_body.append(data, length);
          return true;
        }
        auto events = parser.Feed(std::string_view(data, length));
        if (!events.ok()) {
          parse_error = events.status();
          return false;
        }
        for (const auto& e : *events) {
          if (!on_event(e)) {
            stopped = true;
            return false;
          }
        }
        return true;
      });
  if (stopped) return Status::Ok();
  if (!parse_error.ok()) return parse_error;
  if (http_status != 0 && http_status != 200) {
    RETURN_IF_ERROR(StatusFromHttp(http_status, error_body));
  }
  if (!res) {
    return common::Unavailable("GET " + url_ + path + ": " + NetworkError(res.error()));
  }
  return Status::Ok();
}

}  // namespace kiln::cli
