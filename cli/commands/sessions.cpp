// `kiln sessions`: the caller's sessions, optionally of one conversation.
#include "cli/commands/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/format.hpp"
#include "common/clock.hpp"

namespace kiln::cli {
namespace {

constexpr char kFooter[] = R"txt(Examples:
  kiln sessions
  kiln sessions --conversation chat-7
  kiln sessions --json | jq -r '.sessions[].id'

A session keeps its interpreter's state between runs (kiln run --session ID).
EPOCH changes whenever the interpreter was recreated, so its state was lost.)txt";

struct SessionsFlags {
  std::string conversation;
  bool json = false;
};

int Sessions(const SessionsFlags& flags, const GlobalFlags& globals) {
  auto client = Connect(globals, TokenRole::kTenant);
  if (!client.ok()) return ReportError(client.status());
  auto body = (*client)->ListSessions(flags.conversation);
  if (!body.ok()) return ReportError(body.status());
  WriteOut(flags.json
               ? JsonText(*body)
               : FormatSessionsTable(body->value("sessions", nlohmann::json()), common::NowMs()));
  return kExitOk;
}

}  // namespace

Command AddSessionsCommand(CLI::App& root, const GlobalFlags* globals) {
  auto flags = std::make_shared<SessionsFlags>();
  CLI::App* app = root.add_subcommand("sessions", "List your sessions (GET /v1/sessions)");
  app->footer(kFooter);
  app->add_option("--conversation", flags->conversation, "Only this conversation's sessions")
      ->type_name("ID");
  app->add_flag("--json", flags->json, "Print the broker's answer as JSON");
  return {app, [flags, globals] { return Sessions(*flags, *globals); }};
}

}  // namespace kiln::cli
