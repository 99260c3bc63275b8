// `kiln health`: whether the broker is up and reaches Redis.
#include "cli/commands/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/format.hpp"

namespace kiln::cli {
namespace {

constexpr char kFooter[] = R"txt(Examples:
  kiln health
  kiln health --url http://broker:8080 --json

Exits 0 when healthy, 69 when the broker is unreachable or cannot reach Redis.
Needs no token.)txt";

struct HealthFlags {
  bool json = false;
};

int Health(const HealthFlags& flags, const GlobalFlags& globals) {
  auto client = Connect(globals, TokenRole::kNone);
  if (!client.ok()) return ReportError(client.status());
  bool healthy = false;
  auto body = (*client)->Health(&healthy);
  if (!body.ok()) return ReportError(body.status());
  WriteOut(flags.json ? JsonText(*body) : FormatHealth(*body));
  return healthy ? kExitOk : kExitUnavailable;
}

}  // namespace

Command AddHealthCommand(CLI::App& root, const GlobalFlags* globals) {
  auto flags = std::make_shared<HealthFlags>();
  CLI::App* app = root.add_subcommand("health", "Check that the broker is up (GET /v1/health)");
  app->footer(kFooter);
  app->add_flag("--json", flags->json, "Print the broker's answer as JSON");
  return {app, [flags, globals] { return Health(*flags, *globals); }};
}

}  // namespace kiln::cli
