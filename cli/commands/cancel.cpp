// `kiln cancel ID`: ends a queued or running execution.
#include "cli/commands/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/format.hpp"

namespace kiln::cli {
namespace {

constexpr char kFooter[] = R"txt(Examples:
  id=$(kiln run long.py --no-wait) && kiln cancel "$id"
  kiln cancel ex_0123456789abcdefghij --json

A queued job ends at once and never runs; a running one is killed and keeps
the output it produced so far. Cancelling a finished job changes nothing.
Exits 0 when the job has ended (whatever its status), 75 when the worker has
not confirmed yet (check again with kiln status ID), 64 for an unknown id.)txt";

struct CancelFlags {
  std::string id;
  bool json = false;
};

bool IsTerminalStatus(const std::string& status) {
  return status != "queued" && status != "running" && status != "awaiting_approval";
}

int Cancel(const CancelFlags& flags, const GlobalFlags& globals) {
  auto client = Connect(globals, TokenRole::kTenant);
  if (!client.ok()) return ReportError(client.status());
  auto body = (*client)->Cancel(flags.id);
  if (!body.ok()) return ReportError(body.status());
  const std::string status = body->value("status", "");
  if (flags.json) {
    WriteOut(JsonText(*body));
  } else if (IsTerminalStatus(status)) {
    WriteOut(FormatRecordSummary(*body));
  } else {
    WriteOut(flags.id + " " + status + ": cancel requested, not confirmed yet\n");
  }
  return IsTerminalStatus(status) ? kExitOk : kExitPending;
}

}  // namespace

Command AddCancelCommand(CLI::App& root, const GlobalFlags* globals) {
  auto flags = std::make_shared<CancelFlags>();
  CLI::App* app = root.add_subcommand("cancel", "Cancel a queued or running execution");
  app->footer(kFooter);
  app->add_option("ID", flags->id, "The execution id (ex_...)")->required()->type_name("ID");
  app->add_flag("--json", flags->json, "Print the broker's answer as JSON");
  return {app, [flags, globals] { return Cancel(*flags, *globals); }};
}

}  // namespace kiln::cli
