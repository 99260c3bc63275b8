// The kiln CLI's subcommands: each Add*Command registers one on the root app
// and returns what runs it once the command line has been parsed.
//
//   Command run = AddRunCommand(app, &globals);
//   CLI11_PARSE(app, argc, argv);  if (run.app->parsed()) return run.run();
//
// One file each in commands/: run, status, cancel, sessions, kill, approvals,
// approve + deny, workers, health, mcp, audit, keygen. Main thread only (mcp starts its own
// threads for tool calls).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>

#include "cli/api_client.hpp"
#include "cli/client_config.hpp"
#include "common/status.hpp"

namespace kiln::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;  // returns the process exit status
};

// `globals` is filled by the root app's --url/--token while parsing and read
// when the command runs; it must outlive the returned Command.
Command AddRunCommand(CLI::App& root, const GlobalFlags* globals);
Command AddStatusCommand(CLI::App& root, const GlobalFlags* globals);
Command AddWorkersCommand(CLI::App& root, const GlobalFlags* globals);
Command AddHealthCommand(CLI::App& root, const GlobalFlags* globals);
Command AddCancelCommand(CLI::App& root, const GlobalFlags* globals);
Command AddSessionsCommand(CLI::App& root, const GlobalFlags* globals);
Command AddKillCommand(CLI::App& root, const GlobalFlags* globals);
Command AddApprovalsCommand(CLI::App& root, const GlobalFlags* globals);
Command AddApproveCommand(CLI::App& root, const GlobalFlags* globals);
Command AddDenyCommand(CLI::App& root, const GlobalFlags* globals);
Command AddMcpCommand(CLI::App& root, const GlobalFlags* globals);
Command AddAuditCommand(CLI::App& root, const GlobalFlags* globals);
Command AddKeygenCommand(CLI::App& root);

// Shared by the commands.

// Prints "kiln: CODE: message" to stderr and returns the exit status for it.
int ReportError(const common::Status& status);

// Resolves the broker address and token for `role` and builds a client.
common::StatusOr<std::unique_ptr<ApiClient>> Connect(const GlobalFlags& globals, TokenRole role);

// Writes `text` to stdout or stderr byte for byte and flushes.
void WriteOut(const std::string& text);
void WriteErr(const std::string& text);

// Pretty JSON (2-space indent, invalid UTF-8 replaced) plus a newline.
std::string JsonText(const nlohmann::json& j);

}  // namespace kiln::cli
