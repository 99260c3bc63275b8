// `kiln status ID`: one execution's record, summarized or as JSON.
#include "cli/commands/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/format.hpp"

namespace kiln::cli {
namespace {

constexpr char kFooter[] = R"txt(Examples:
  kiln status ex_0123456789abcdefghij
  kiln status "$(kiln run job.py --no-wait)" --json | jq .stdout

Exits 0 when the record was read, whatever the job's state; 64 for an unknown id.)txt";

struct StatusFlags {
  std::string id;
  bool json = false;
};

int ShowStatus(const StatusFlags& flags, const GlobalFlags& globals) {
  auto client = Connect(globals, TokenRole::kTenant);
  if (!client.ok()) return ReportError(client.status());
  auto record = (*client)->GetExecution(flags.id);
  if (!record.ok()) return ReportError(record.status());
  WriteOut(flags.json ? JsonText(*record) : FormatRecordSummary(*record));
  return kExitOk;
}

}  // namespace

Command AddStatusCommand(CLI::App& root, const GlobalFlags* globals) {
  auto flags = std::make_shared<StatusFlags>();
  CLI::App* app = root.add_subcommand("status", "Show an execution's state and outcome");
  app->footer(kFooter);
  app->add_option("ID", flags->id, "The execution id (ex_...)")->required()->type_name("ID");
  app->add_flag("--json", flags->json, "Print the full execution record as JSON");
  return {app, [flags, globals] { return ShowStatus(*flags, *globals); }};
}

}  // namespace kiln::cli
