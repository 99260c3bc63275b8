// `kiln approvals`: executions awaiting approval, with their code (admin).
#include "cli/commands/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/format.hpp"
#include "common/clock.hpp"

namespace kiln::cli {
namespace {

constexpr char kFooter[] = R"txt(Examples:
  kiln approvals
  kiln approvals --json | jq -r '.approvals[].id'

Each pending execution is shown with its code, every line prefixed with
"    | "; control characters and bidirectional overrides are shown as escapes
(\x1b, \u202e) so the code cannot hide anything from your terminal. Then:
kiln approve ID [--trust-session] or kiln deny ID. Needs an admin token.)txt";

struct ApprovalsFlags {
  bool json = false;
};

int Approvals(const ApprovalsFlags& flags, const GlobalFlags& globals) {
  auto client = Connect(globals, TokenRole::kAdmin);
  if (!client.ok()) return ReportError(client.status());
  auto body = (*client)->ListApprovals();
  if (!body.ok()) return ReportError(body.status());
  WriteOut(flags.json
               ? JsonText(*body)
               : FormatApprovals(body->value("approvals", nlohmann::json()), common::NowMs()));
  return kExitOk;
}

}  // namespace

Command AddApprovalsCommand(CLI::App& root, const GlobalFlags* globals) {
  auto flags = std::make_shared<ApprovalsFlags>();
  CLI::App* app = root.add_subcommand("approvals",
                                      "List executions awaiting approval, with their code (admin)");
  app->footer(kFooter);
  app->add_flag("--json", flags->json, "Print the broker's answer as JSON");
  return {app, [flags, globals] { return Approvals(*flags, *globals); }};
}

}  // namespace kiln::cli
