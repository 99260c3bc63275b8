#include "cli/mcp/json_rpc.hpp"

#include "common/json/bounded_json.hpp"

namespace kiln::cli::mcp {
namespace {

using nlohmann::json;

DecodedLine Fail(int code, std::string message, json id = nullptr) {
  DecodedLine d;
  d.error = {code, std::move(message), nullptr};
  d.error_id = std::move(id);
  return d;
}

bool IsValidId(const json& id) { return id.is_string() || id.is_number(); }

}  // namespace

DecodedLine DecodeLine(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  // The MCP host's line is untrusted: bounded before anything recurses into it.
  auto parsed = common::ParseJson(line);
  if (!parsed.ok()) {
    return Fail(kParseError, "Parse error: " + parsed.status().message());
  }
  json j = std::move(*parsed);
  if (j.is_array()) {
    return Fail(kInvalidRequest, "Invalid Request: JSON-RPC batches are not supported");
  }
  if (!j.is_object()) return Fail(kInvalidRequest, "Invalid Request: expected a JSON object");

  // The id to answer errors with, when there is a usable one.
  json id = nullptr;
  const bool has_id = j.contains("id");
  if (has_id && IsValidId(j["id"])) id = j["id"];

  auto version = j.find("jsonrpc");
  if (version == j.end() || *version != "2.0") {
    return Fail(kInvalidRequest, "Invalid Request: \"jsonrpc\" must be \"2.0\"", id);
  }
  if (has_id && !IsValidId(j["id"])) {
    return Fail(kInvalidRequest, "Invalid Request: \"id\" must be a string or an integer");
  }

  Message m;
  auto method = j.find("method");
  if (method == j.end()) {
    if (has_id && (j.contains("result") || j.contains("error"))) {
      m.kind = Message::Kind::kResponse;
      m.id = id;
      return {m, {}, nullptr};
    }
    return Fail(kInvalidRequest, "Invalid Request: no \"method\"", id);
  }
  if (!method->is_string()) {
    return Fail(kInvalidRequest, "Invalid Request: \"method\" must be a string", id);
  }
  m.method = method->get<std::string>();
  m.kind = has_id ? Message::Kind::kRequest : Message::Kind::kNotification;
  m.id = id;
  if (auto params = j.find("params"); params != j.end()) {
    if (params->is_object()) {
      m.params = *params;
    } else if (!params->is_null() && m.kind == Message::Kind::kRequest) {
      // MCP's params are always objects (JSON-RPC also allows arrays).
      return Fail(kInvalidParams, "Invalid params: \"params\" must be an object", id);
    }  // a notification is never answered, not even with an error
  }
  return {m, {}, nullptr};
}

json ResultResponse(const json& id, json result) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}};
}

json ErrorResponse(const json& id, const RpcError& error) {
  json e = {{"code", error.code}, {"message", error.message}};
  if (!error.data.is_null()) e["data"] = error.data;
  return {{"jsonrpc", "2.0"}, {"id", id}, {"error", std::move(e)}};
}

std::string EncodeLine(const json& message) {
  return message.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace kiln::cli::mcp
