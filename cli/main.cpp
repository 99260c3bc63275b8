// kiln: the command-line client of a Kiln cluster. Parses flags and dispatches
// to the subcommands in cli/commands/; talks to the broker over HTTP only.
#include <CLI/CLI.hpp>
#include <vector>

#include "cli/commands/command.hpp"
#include "cli/exit_codes.hpp"

namespace {

constexpr char kFooter[] = R"txt(Broker address and token, first found wins:
  --url / --token, $KILN_URL / $KILN_TOKEN ($KILN_ADMIN_TOKEN for the admin
  commands workers, approvals, approve, deny),
  ~/.config/kiln/config.yaml (or $KILN_CONFIG) with keys url, token, admin_token,
  default url http://127.0.0.1:8080.

Examples:
  kiln run -l python -c 'print(1)'
  kiln --url http://broker:8080 --token "$TOKEN" run script.py --input n=3
  kiln run long.py --stream
  kiln status ex_0123456789abcdefghij
  kiln sessions --conversation chat-7; kiln kill s1
  KILN_ADMIN_TOKEN=... kiln approvals
  kiln workers
  kiln mcp                      # a Model Context Protocol server on stdio

Run 'kiln <command> --help' for a command's flags. See docs/cli.md.)txt";

}  // namespace

int main(int argc, char** argv) {
  using namespace kiln::cli;
  CLI::App app("kiln: run untrusted code on a Kiln cluster", "kiln");
  app.set_version_flag("--version", KILN_VERSION);
  app.footer(kFooter);
  app.require_subcommand(1);
  // Global flags are accepted before or after the subcommand.
  app.fallthrough();
  GlobalFlags globals;
  app.add_option_function<std::string>(
         "--url", [&](const std::string& v) { globals.url = v; },
         "Broker URL (default $KILN_URL, the config file, http://127.0.0.1:8080)")
      ->type_name("URL");
  app.add_option_function<std::string>(
         "--token", [&](const std::string& v) { globals.token = v; },
         "Bearer token (default $KILN_TOKEN / $KILN_ADMIN_TOKEN, the config file)")
      ->type_name("TOKEN");

  const std::vector<Command> commands = {
      AddRunCommand(app, &globals),
      AddStatusCommand(app, &globals),
      AddCancelCommand(app, &globals),
      AddSessionsCommand(app, &globals),
      AddKillCommand(app, &globals),
      AddApprovalsCommand(app, &globals),
      AddApproveCommand(app, &globals),
      AddDenyCommand(app, &globals),
      AddWorkersCommand(app, &globals),
      AddHealthCommand(app, &globals),
      AddMcpCommand(app, &globals),
      AddAuditCommand(app, &globals),
      AddKeygenCommand(app),
  };

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }
  for (const auto& command : commands) {
    if (command.app->parsed()) return command.run();
  }
  return kExitUsage;
}
