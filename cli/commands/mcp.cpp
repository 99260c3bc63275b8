// `kiln mcp`: a Model Context Protocol server on stdio (docs/mcp.md).
#include <unistd.h>

#include <csignal>

#include "cli/commands/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/mcp/api_backend.hpp"
#include "cli/mcp/mcp_server.hpp"
#include "cli/mcp/stdio_server.hpp"

namespace kiln::cli {
namespace {

constexpr char kFooter[] =
    R"txt(Speaks MCP (revision 2025-06-18) as JSON-RPC lines on stdin/stdout; logs
go to stderr. Tools: execute_code (only when code execution is enabled for
your tenant), list_sessions, kill_session. See docs/mcp.md.

An MCP client configuration, e.g.:
  {"mcpServers": {"kiln": {"command": "kiln", "args": ["mcp"],
                           "env": {"KILN_URL": "https://kiln.example.com",
                                   "KILN_TOKEN": "..."}}}}

Exits 0 when stdin ends, 64 when the broker refuses the token, 74 when
stdout or stdin fails.)txt";

struct McpFlags {
  int parallel = 4;
};

int Mcp(const McpFlags& flags, const GlobalFlags& globals) {
  // A client that goes away closes our stdout: get EPIPE, not a signal.
  std::signal(SIGPIPE, SIG_IGN);
  auto config = LoadClientConfig(globals, TokenRole::kTenant, EnvFromProcess());
  if (!config.ok()) return ReportError(config.status());
  mcp::ApiBackend backend(*config);
  auto server = mcp::McpServer::Create(&backend);
  if (!server.ok()) return ReportError(server.status());
  const mcp::Offer& offer = (*server)->catalog().offer();
  if (!offer.note.empty()) WriteErr("kiln mcp: " + offer.note + "\n");
  if (!offer.code_execution) {
    WriteErr("kiln mcp: code execution is disabled for this tenant; execute_code not offered\n");
  }
  mcp::StdioServer stdio(server->get(), STDIN_FILENO, STDOUT_FILENO, flags.parallel);
  common::Status st = stdio.Run();
  if (!st.ok()) {
    WriteErr("kiln mcp: " + st.ToString() + "\n");
    return kExitIoError;
  }
  return kExitOk;
}

}  // namespace

Command AddMcpCommand(CLI::App& root, const GlobalFlags* globals) {
  auto flags = std::make_shared<McpFlags>();
  CLI::App* app = root.add_subcommand("mcp", "Serve the Model Context Protocol on stdio");
  app->footer(kFooter);
  app->add_option("--parallel", flags->parallel, "Tool calls served at once (default 4)")
      ->type_name("N")
      ->check(CLI::Range(1, 64));
  return {app, [flags, globals] { return Mcp(*flags, *globals); }};
}

}  // namespace kiln::cli
