// ToolCalls: what `tools/call` does for each tool of the ToolCatalog —
// checks the arguments against the tool's inputSchema, calls the broker
// through the Backend and shapes the answer as an MCP CallToolResult.
//
//   ToolCalls calls(&backend, &catalog);
//   ToolOutcome out = calls.Call("execute_code", {{"runtime", "python"}, {"code", "print(1)"}});
//
// Arguments that break the schema, and tools not offered, are JSON-RPC errors
// (-32602). Errors from the broker are tool results with isError: true whose
// structuredContent.error carries the API's code ({"code", "message",
// "retryable"}) and whose text names it. An execution that ran is a normal
// result even when the code failed (see exitCode/status); isError is set when
// it never ran or did not finish (rejected, error, still pending). Every result
// has structuredContent matching the tool's outputSchema plus one text item
// holding that JSON; execute_code adds an image item per collected image
// (png, jpeg, gif, webp). Thread-safe when the Backend is (no state of its own).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli/mcp/backend.hpp"
#include "cli/mcp/call_cancel.hpp"
#include "cli/mcp/json_rpc.hpp"
#include "cli/mcp/tool_catalog.hpp"
#include "common/status.hpp"

namespace kiln::cli::mcp {

struct ToolOutcome {
  std::optional<RpcError> error;  // set: answer the request with this JSON-RPC error
  nlohmann::json result;          // else: the CallToolResult
};

// The structuredContent of execute_code for an execution record, and for a
// request the broker refused before any execution existed.
nlohmann::json ExecutionContent(const nlohmann::json& record);
nlohmann::json RefusedExecutionContent(const common::Status& status,
                                       const nlohmann::json& session_id);
// MCP image content blocks for the images among a structuredContent's `files`.
nlohmann::json ImageBlocks(const nlohmann::json& content);
// {"code": "SESSION_NOT_FOUND", "message", "retryable"} for a Status.
nlohmann::json ErrorObject(const common::Status& status);
// One session of GET /v1/sessions in the MCP tools' camelCase.
nlohmann::json SessionContent(const nlohmann::json& session);

class ToolCalls {
 public:
  ToolCalls(Backend* backend, const ToolCatalog* catalog) : backend_(backend), catalog_(catalog) {}

  // `ticket` (may be null) lets notifications/cancelled stop an execute_code
  // call while it waits (cli/mcp/call_cancel.hpp).
  ToolOutcome Call(const std::string& name, const nlohmann::json& arguments,
                   CancelTicket* ticket = nullptr) const;

 private:
  ToolOutcome ExecuteCode(const nlohmann::json& args, CancelTicket* ticket) const;
  ToolOutcome ListSessions(const nlohmann::json& args) const;
  ToolOutcome KillSession(const nlohmann::json& args) const;

  Backend* backend_;
  const ToolCatalog* catalog_;
};

}  // namespace kiln::cli::mcp
