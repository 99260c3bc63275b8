// `kiln kill SESSION`: ends a session and its interpreter.
#include "cli/commands/command.hpp"
#include "cli/exit_codes.hpp"

namespace kiln::cli {
namespace {

constexpr char kFooter[] = R"txt(Examples:
  kiln kill s1
  kiln sessions --conversation chat-7 --json | jq -r '.sessions[].id' | xargs -n1 kiln kill

Exits 0 when the session was deleted, 64 when there is no such session
(SESSION_NOT_FOUND).)txt";

struct KillFlags {
  std::string session;
  bool json = false;
};

int Kill(const KillFlags& flags, const GlobalFlags& globals) {
  auto client = Connect(globals, TokenRole::kTenant);
  if (!client.ok()) return ReportError(client.status());
  auto body = (*client)->DeleteSession(flags.session);
  if (!body.ok()) return ReportError(body.status());
  WriteOut(flags.json
               ? JsonText(*body)
               : body->value("id", flags.session) + " " + body->value("state", "deleted") + "\n");
  return kExitOk;
}

}  // namespace

Command AddKillCommand(CLI::App& root, const GlobalFlags* globals) {
  auto flags = std::make_shared<KillFlags>();
  CLI::App* app =
      root.add_subcommand("kill", "Delete a session and its interpreter (DELETE /v1/sessions/ID)");
  app->footer(kFooter);
  app->add_option("SESSION", flags->session, "The session id")->required()->type_name("SESSION");
  app->add_flag("--json", flags->json, "Print the broker's answer as JSON");
  return {app, [flags, globals] { return Kill(*flags, *globals); }};
}

}  // namespace kiln::cli
