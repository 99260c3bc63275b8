// McpServer: the Model Context Protocol server behind `kiln mcp` — protocol
// state and the method table (initialize, ping, tools/list, tools/call and
// the notifications), independent of how messages travel (StdioServer).
//
//   ASSIGN_OR_RETURN(auto server, McpServer::Create(&backend));
//   if (auto reply = server->HandleLine(line)) WriteLine(*reply);
//
// Protocol revision 2025-06-18: initialize answers with the client's
// requested revision when it is one of kSupportedVersions, else with
// kLatestVersion. Requests other than initialize and ping before initialize
// are refused (-32600). Unknown methods get -32601, bad params -32602 (also
// unknown tools), malformed lines -32700/-32600 (cli/mcp/json_rpc.hpp).
// Notifications are never answered; notifications/cancelled cancels the
// execution behind a tools/call in progress, which then gets no response
// (cli/mcp/call_cancel.hpp). Responses from the client (this server sends no
// requests) are ignored. Create() asks the broker once what this
// tenant may do (GET /v1/capabilities) and fixes the tool list for the life
// of the server (listChanged: false).
//
// Handle/HandleLine may be called from several threads at once (the stdio
// loop runs tools/call in parallel); the protocol state is guarded.
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "cli/mcp/backend.hpp"
#include "cli/mcp/call_cancel.hpp"
#include "cli/mcp/json_rpc.hpp"
#include "cli/mcp/tool_calls.hpp"
#include "cli/mcp/tool_catalog.hpp"
#include "common/status.hpp"

namespace kiln::cli::mcp {

inline constexpr char kLatestVersion[] = "2025-06-18";
inline constexpr std::array<const char*, 3> kSupportedVersions = {"2025-06-18", "2025-03-26",
                                                                  "2024-11-05"};

class McpServer {
 public:
  // Probes the broker through `backend` (which must outlive the server). Fails
  // only when the broker refuses the token (UNAUTHORIZED, FORBIDDEN).
  static common::StatusOr<std::unique_ptr<McpServer>> Create(Backend* backend);

  // Handles a decoded message; the response to send, if any.
  std::optional<nlohmann::json> Handle(const Message& message);
  // Decodes and handles one line; the response line ("...\n") to send, if any.
  std::optional<std::string> HandleLine(std::string_view line);

  const ToolCatalog& catalog() const { return catalog_; }
  // The negotiated protocol revision ("" before initialize).
  std::string protocol_version() const;

 private:
  McpServer(Backend* backend, Offer offer);
  std::optional<nlohmann::json> Dispatch(const Message& message);

  struct Outcome {  // a request's result or its error
    nlohmann::json result;
    std::optional<RpcError> error;
  };
  Outcome Initialize(const nlohmann::json& params);
  Outcome ListTools(const nlohmann::json& params) const;
  Outcome CallTool(const nlohmann::json& params, CancelTicket* ticket) const;

  Backend* backend_;
  ToolCatalog catalog_;
  ToolCalls calls_;
  CallCancels cancels_;  // tools/call requests in progress

  mutable std::mutex mu_;
  std::string version_;  // guarded by mu_; set by initialize
};

}  // namespace kiln::cli::mcp
