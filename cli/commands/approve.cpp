// `kiln approve ID` and `kiln deny ID`: an admin's decision on an execution
// awaiting approval.
#include "cli/commands/command.hpp"
#include "cli/exit_codes.hpp"

namespace kiln::cli {
namespace {

constexpr char kApproveFooter[] = R"txt(Examples:
  kiln approvals                       # review the pending code first
  kiln approve ex_0123456789abcdefghij
  kiln approve ex_0123456789abcdefghij --trust-session

--trust-session also approves every later execution of the same session
automatically. Needs an admin token: --token, $KILN_ADMIN_TOKEN or admin_token
in the config file.)txt";

constexpr char kDenyFooter[] = R"txt(Examples:
  kiln deny ex_0123456789abcdefghij

The execution ends 'rejected' with APPROVAL_DENIED and never runs. Needs an
admin token: --token, $KILN_ADMIN_TOKEN or admin_token in the config file.)txt";

struct DecisionFlags {
  std::string id;
  bool trust_session = false;
  bool json = false;
};

int Decide(const DecisionFlags& flags, const GlobalFlags& globals, bool approve) {
  auto client = Connect(globals, TokenRole::kAdmin);
  if (!client.ok()) return ReportError(client.status());
  auto body =
      approve ? (*client)->Approve(flags.id, flags.trust_session) : (*client)->Deny(flags.id);
  if (!body.ok()) return ReportError(body.status());
  if (flags.json) {
    WriteOut(JsonText(*body));
  } else {
    std::string line = flags.id + (approve ? " approved" : " denied");
    if (approve && flags.trust_session) line += " (session trusted)";
    if (auto status = body->value("status", ""); !status.empty()) line += ": now " + status;
    WriteOut(line + "\n");
  }
  return kExitOk;
}

}  // namespace

Command AddApproveCommand(CLI::App& root, const GlobalFlags* globals) {
  auto flags = std::make_shared<DecisionFlags>();
  CLI::App* app = root.add_subcommand("approve", "Approve an execution awaiting approval (admin)");
  app->footer(kApproveFooter);
  app->add_option("ID", flags->id, "The execution id (ex_...)")->required()->type_name("ID");
  app->add_flag("--trust-session", flags->trust_session,
                "Also approve the rest of this execution's session automatically");
  app->add_flag("--json", flags->json, "Print the broker's answer as JSON");
  return {app, [flags, globals] { return Decide(*flags, *globals, /*approve=*/true); }};
}

Command AddDenyCommand(CLI::App& root, const GlobalFlags* globals) {
  auto flags = std::make_shared<DecisionFlags>();
  CLI::App* app = root.add_subcommand("deny", "Deny an execution awaiting approval (admin)");
  app->footer(kDenyFooter);
  app->add_option("ID", flags->id, "The execution id (ex_...)")->required()->type_name("ID");
  app->add_flag("--json", flags->json, "Print the broker's answer as JSON");
  return {app, [flags, globals] { return Decide(*flags, *globals, /*approve=*/false); }};
}

}  // namespace kiln::cli
