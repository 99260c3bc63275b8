#include "cli/mcp/mcp_server.hpp"

namespace kiln::cli::mcp {
namespace {

using common::StatusOr;
using nlohmann::json;

RpcError Error(int code, std::string message) { return {code, std::move(message), nullptr}; }

bool Supported(const std::string& version) {
  for (const char* v : kSupportedVersions) {
    if (version == v) return true;
  }
  return false;
}

}  // namespace

StatusOr<std::unique_ptr<McpServer>> McpServer::Create(Backend* backend) {
  ASSIGN_OR_RETURN(Offer offer, OfferFromCapabilities(backend->Capabilities()));
  return std::unique_ptr<McpServer>(new McpServer(backend, std::move(offer)));
}

McpServer::McpServer(Backend* backend, Offer offer)
    : backend_(backend), catalog_(std::move(offer)), calls_(backend, &catalog_) {}

std::string McpServer::protocol_version() const {
  std::lock_guard lock(mu_);
  return version_;
}

std::optional<std::string> McpServer::HandleLine(std::string_view line) {
  DecodedLine in = DecodeLine(line);
  if (!in.ok()) return EncodeLine(ErrorResponse(in.error_id, in.error));
  auto reply = Handle(*in.message);
  if (!reply) return std::nullopt;
  return EncodeLine(*reply);
}

std::optional<json> McpServer::Handle(const Message& message) {
  try {
    return Dispatch(message);
  } catch (const json::exception& e) {
    // A JSON value of an unexpected shape that a handler did not check: a bug
    // here, reported to the client rather than ending the process.
    if (message.kind != Message::Kind::kRequest) return std::nullopt;
    return ErrorResponse(message.id,
                         Error(kInternalError, std::string("Internal error: ") + e.what()));
  }
}

std::optional<json> McpServer::Dispatch(const Message& message) {
  // Responses (this server asks nothing) and notifications get no answer:
  // notifications/initialized needs no action; notifications/cancelled stops
  // the call it names (its execution is cancelled; the call gets no answer).
  if (message.kind == Message::Kind::kNotification && message.method == "notifications/cancelled" &&
      message.params.is_object()) {
    auto id = message.params.find("requestId");
    if (id != message.params.end() && (id->is_string() || id->is_number_integer())) {
      cancels_.Cancel(*id, backend_);
    }
  }
  if (message.kind != Message::Kind::kRequest) return std::nullopt;
  const std::string& method = message.method;
  Outcome out;
  if (method == "initialize") {
    out = Initialize(message.params);
  } else if (method == "ping") {
    out.result = json::object();
  } else if (method == "tools/list" || method == "tools/call") {
    if (protocol_version().empty()) {
      out.error = Error(kInvalidRequest, "Invalid Request: send initialize first");
    } else if (method == "tools/list") {
      out = ListTools(message.params);
    } else {
      auto ticket = cancels_.Open(message.id);
      out = CallTool(message.params, ticket.get());
      cancels_.Close(message.id);
      if (ticket->cancelled()) return std::nullopt;  // the spec: no response
    }
  } else {
    out.error = Error(kMethodNotFound, "Method not found: " + method);
  }
  if (out.error) return ErrorResponse(message.id, *out.error);
  return ResultResponse(message.id, std::move(out.result));
}

McpServer::Outcome McpServer::Initialize(const json& params) {
  auto requested = params.find("protocolVersion");
  if (requested == params.end() || !requested->is_string()) {
    return {nullptr, Error(kInvalidParams, "Invalid params: protocolVersion must be a string")};
  }
  std::string version = *requested;
  if (!Supported(version)) version = kLatestVersion;
  {
    std::lock_guard lock(mu_);
    if (!version_.empty()) {
      return {nullptr, Error(kInvalidRequest, "Invalid Request: already initialized")};
    }
    version_ = version;
  }
  std::string instructions =
      "Kiln runs code in isolated sandboxes. execute_code runs python, javascript or shell and "
      "returns stdout, stderr, exitCode and the JSON value of a variable named `result`. Pass "
      "a sessionId to keep variables between calls, and a conversationId to find and clean up "
      "a conversation's sessions later (list_sessions, kill_session).";
  if (!catalog_.offer().code_execution) {
    instructions =
        "Code execution is disabled for this tenant on this Kiln cluster, so execute_code is "
        "not offered; list_sessions and kill_session manage existing sessions.";
  }
  return {{{"protocolVersion", version},
           {"capabilities", {{"tools", {{"listChanged", false}}}}},
           {"serverInfo", {{"name", "kiln"}, {"title", "Kiln"}, {"version", KILN_VERSION}}},
           {"instructions", instructions}},
          std::nullopt};
}

McpServer::Outcome McpServer::ListTools(const json& params) const {
  if (auto cursor = params.find("cursor"); cursor != params.end() && !cursor->is_null()) {
    // This server never hands out a cursor, so none can be valid.
    return {nullptr, Error(kInvalidParams, "Invalid params: unknown cursor")};
  }
  return {{{"tools", catalog_.List()}}, std::nullopt};
}

McpServer::Outcome McpServer::CallTool(const json& params, CancelTicket* ticket) const {
  auto name = params.find("name");
  if (name == params.end() || !name->is_string()) {
    return {nullptr, Error(kInvalidParams, "Invalid params: \"name\" must be a string")};
  }
  json arguments = params.value("arguments", json::object());
  if (arguments.is_null()) arguments = json::object();
  ToolOutcome out = calls_.Call(*name, arguments, ticket);
  if (out.error) return {nullptr, out.error};
  return {std::move(out.result), std::nullopt};
}

}  // namespace kiln::cli::mcp
