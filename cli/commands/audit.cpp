// `kiln audit verify` and `kiln audit export`: read the audit trail through
// GET /v1/audit (admin) and check its hash chain here, on the client, so a
// verdict does not rest on the broker's word.
#include <fstream>

#include "cli/commands/command.hpp"
#include "cli/exit_codes.hpp"
#include "common/audit/audit_chain.hpp"

namespace kiln::cli {
namespace {

constexpr size_t kPage = 1000;

constexpr char kFooter[] = R"txt(Examples:
  kiln audit verify                 # exit 0: intact; 1: names the first broken entry
  kiln audit export > audit.jsonl   # one JSON object per line: id, prev, hash, entry
  kiln audit export --out audit.jsonl

Needs an admin token (KILN_ADMIN_TOKEN or --token). The chain is checked from
the first entry still kept (trimming keeps it verifiable): every entry's hash
must be SHA-256 over the previous hash and the entry, so an edited or deleted
entry breaks it at that entry.)txt";

struct AuditFlags {
  std::string out;  // export: file, or stdout
};

// Calls `on_entry` for every entry, page by page; fills anchor and head from
// the first and last page.
common::Status Walk(ApiClient& client, std::string* anchor, std::string* head,
                    const std::function<bool(const nlohmann::json&)>& on_entry) {
  std::string after;
  bool first = true;
  while (true) {
    ASSIGN_OR_RETURN(nlohmann::json page, client.ReadAudit(after, kPage));
    if (first) *anchor = page.value("anchor", "");
    first = false;
    *head = page.value("head", "");
    const auto& entries = page["entries"];
    if (!entries.is_array() || entries.empty()) return common::Status::Ok();
    for (const auto& e : entries) {
      if (!on_entry(e)) return common::Status::Ok();
    }
    after = entries.back().value("id", "");
  }
}

int Verify(const GlobalFlags& globals) {
  auto client = Connect(globals, TokenRole::kAdmin);
  if (!client.ok()) return ReportError(client.status());
  std::string anchor, head;
  std::optional<common::AuditChainVerifier> verifier;
  std::string last_hash;
  auto st = Walk(**client, &anchor, &head, [&](const nlohmann::json& j) {
    if (!verifier) verifier.emplace(anchor.empty() ? std::string(common::kAuditGenesis) : anchor);
    auto e = common::StoredAuditEntry::FromExportJson(j);
    if (!e.ok()) {
      WriteErr("kiln: audit entry " + j.value("id", "?") +
               " is malformed: " + e.status().message() + "\n");
      return false;
    }
    last_hash = e->hash;
    return verifier->Add(*e);
  });
  if (!st.ok()) return ReportError(st);
  if (verifier && verifier->broken()) {
    const auto& b = *verifier->broken();
    WriteOut("audit chain BROKEN at entry " + std::to_string(b.index) + " (id " + b.id +
             "): " + b.reason + "\n");
    return kExitFailed;
  }
  const uint64_t checked = verifier ? verifier->checked() : 0;
  // Deleting the newest entries leaves a shorter chain that is intact in
  // itself; the head the broker keeps names the real last one.
  if (!head.empty() && head != (checked ? last_hash : anchor)) {
    WriteOut("audit chain BROKEN at the end: the last entry is not the recorded head (" + head +
             ")\n");
    return kExitFailed;
  }
  WriteOut("audit chain intact: " + std::to_string(checked) + " entries\n");
  return kExitOk;
}

int Export(const AuditFlags& flags, const GlobalFlags& globals) {
  auto client = Connect(globals, TokenRole::kAdmin);
  if (!client.ok()) return ReportError(client.status());
  std::ofstream file;
  if (!flags.out.empty()) {
    file.open(flags.out, std::ios::binary | std::ios::trunc);
    if (!file) return ReportError(common::InvalidRequest("cannot write " + flags.out));
  }
  std::string anchor, head;
  uint64_t n = 0;
  auto st = Walk(**client, &anchor, &head, [&](const nlohmann::json& j) {
    std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    if (file.is_open()) {
      file << line;
    } else {
      WriteOut(line);
    }
    ++n;
    return true;
  });
  if (!st.ok()) return ReportError(st);
  if (file.is_open()) {
    file.close();
    if (!file) return ReportError(common::InvalidRequest("writing " + flags.out + " failed"));
    WriteErr("exported " + std::to_string(n) + " audit entries to " + flags.out + "\n");
  }
  return kExitOk;
}

}  // namespace

Command AddAuditCommand(CLI::App& root, const GlobalFlags* globals) {
  auto flags = std::make_shared<AuditFlags>();
  CLI::App* app = root.add_subcommand("audit", "Verify or export the audit trail (admin)");
  app->footer(kFooter);
  app->require_subcommand(1);
  CLI::App* verify =
      app->add_subcommand("verify", "Check the hash chain; name the first broken entry");
  CLI::App* exp = app->add_subcommand("export", "Write every entry as JSON lines");
  exp->add_option("--out", flags->out, "File to write (default: stdout)");
  return {app, [flags, globals, verify] {
            return verify->parsed() ? Verify(*globals) : Export(*flags, *globals);
          }};
}

}  // namespace kiln::cli
