// `kiln workers`: the workers connected to the broker (admin token).
#include "cli/commands/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/format.hpp"
#include "common/clock.hpp"

namespace kiln::cli {
namespace {

constexpr char kFooter[] = R"txt(Examples:
  KILN_ADMIN_TOKEN=... kiln workers
  kiln workers --wide
  kiln workers --json | jq '.workers[] | {id, load}'

Needs an admin token: --token, $KILN_ADMIN_TOKEN or admin_token in the config file.)txt";

struct WorkersFlags {
  bool json = false;
  bool wide = false;
};

int Workers(const WorkersFlags& flags, const GlobalFlags& globals) {
  auto client = Connect(globals, TokenRole::kAdmin);
  if (!client.ok()) return ReportError(client.status());
  auto body = (*client)->ListWorkers();
  if (!body.ok()) return ReportError(body.status());
  if (flags.json) {
    WriteOut(JsonText(*body));
  } else {
    WriteOut(
        FormatWorkersTable(body->value("workers", nlohmann::json()), common::NowMs(), flags.wide));
  }
  return kExitOk;
}

}  // namespace

Command AddWorkersCommand(CLI::App& root, const GlobalFlags* globals) {
  auto flags = std::make_shared<WorkersFlags>();
  CLI::App* app = root.add_subcommand("workers", "List the connected workers (admin)");
  app->footer(kFooter);
  app->add_flag("--json", flags->json, "Print the broker's answer as JSON");
  app->add_flag("-w,--wide", flags->wide, "Name the sandbox layers instead of counting them");
  return {app, [flags, globals] { return Workers(*flags, *globals); }};
}

}  // namespace kiln::cli
