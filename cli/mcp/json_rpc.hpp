// JSON-RPC 2.0 framing for the MCP server (`kiln mcp`): one message per line
// on stdio, as the MCP stdio transport requires (no embedded newlines).
//
//   DecodedLine in = DecodeLine(line);
//   if (!in.ok()) Write(EncodeLine(ErrorResponse(in.error_id, in.error)));
//
// DecodeLine classifies a line as a request (method + id), a notification
// (method, no id) or a response (result/error + id, which this server never
// asked for and ignores), or says which JSON-RPC error it is: -32700 for text
// that is not JSON, -32600 for JSON that is not a valid message (including
// batches, which MCP 2025-06-18 dropped, and null ids, which MCP forbids).
// Pure functions; any thread. Called by McpServer.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace kiln::cli::mcp {

inline constexpr int kParseError = -32700;
inline constexpr int kInvalidRequest = -32600;
inline constexpr int kMethodNotFound = -32601;
inline constexpr int kInvalidParams = -32602;
inline constexpr int kInternalError = -32603;

struct RpcError {
  int code = kInternalError;
  std::string message;
  nlohmann::json data;  // null: no "data" member
};

struct Message {
  enum class Kind { kRequest, kNotification, kResponse };
  Kind kind = Kind::kRequest;
  nlohmann::json id;  // string or number for requests and responses
  std::string method;
  nlohmann::json params = nlohmann::json::object();  // an object ({} when absent)
};

struct DecodedLine {
  std::optional<Message> message;  // set when the line is a valid message
  RpcError error;                  // otherwise: why not
  nlohmann::json error_id;         // the id to answer the error with (null if unknown)
  bool ok() const { return message.has_value(); }
};

// Decodes one line (without its "\n"; a trailing "\r" is ignored).
DecodedLine DecodeLine(std::string_view line);

// {"jsonrpc": "2.0", "id": id, "result": result}
nlohmann::json ResultResponse(const nlohmann::json& id, nlohmann::json result);
// {"jsonrpc": "2.0", "id": id, "error": {"code", "message"[, "data"]}}
nlohmann::json ErrorResponse(const nlohmann::json& id, const RpcError& error);

// The message as one line: compact JSON (invalid UTF-8 replaced) plus "\n".
std::string EncodeLine(const nlohmann::json& message);

}  // namespace kiln::cli::mcp
