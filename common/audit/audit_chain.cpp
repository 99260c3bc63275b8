#include "common/audit/audit_chain.hpp"

#include "common/audit/sha256.hpp"
#include "common/json/bounded_json.hpp"

namespace kiln::common {

std::string AuditLinkHash(std::string_view prev_hash, std::string_view canonical_entry) {
  Sha256 h;
  h.Update(prev_hash);
  h.Update("\n");
  h.Update(canonical_entry);
  return h.FinishHex();
}

std::string EntryHash(std::string_view prev_hash, const AuditEntry& entry) {
  return AuditLinkHash(prev_hash, entry.Canonical());
}

nlohmann::json StoredAuditEntry::ToExportJson() const {
  nlohmann::json j = nlohmann::json::object();
  j["id"] = id;
  j["prev"] = prev;
  j["hash"] = hash;
  auto parsed = ParseJson(entry);
  j["entry"] = parsed.ok() ? std::move(*parsed) : nlohmann::json(entry);
  return j;
}

StatusOr<StoredAuditEntry> StoredAuditEntry::FromExportJson(const nlohmann::json& j) {
  if (!j.is_object()) return InvalidRequest("audit export line: expected an object");
  StoredAuditEntry e;
  const std::pair<const char*, std::string*> fields[] = {
      {"id", &e.id}, {"prev", &e.prev}, {"hash", &e.hash}};
  for (auto [key, out] : fields) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_string()) {
      return InvalidRequest(std::string("audit export line: ") + key + ": expected a string");
    }
    *out = it->get<std::string>();
  }
  auto it = j.find("entry");
  if (it == j.end()) return InvalidRequest("audit export line: entry: missing");
  e.entry = it->is_string() ? it->get<std::string>() : AuditEntry::CanonicalJson(*it);
  return e;
}

bool AuditChainVerifier::Add(const StoredAuditEntry& e) {
  if (broken_) return false;
  const uint64_t index = checked_;
  if (e.prev != expected_prev_) {
    broken_ = ChainBreak{index, e.id,
                         index == 0 ? "prev does not match the chain's anchor (an entry before "
                                      "it was deleted or edited)"
                                    : "prev does not match the hash of the entry before it (an "
                                      "entry was deleted, inserted or reordered)"};
    return false;
  }
  if (AuditLinkHash(e.prev, e.entry) != e.hash) {
    broken_ = ChainBreak{index, e.id, "hash does not match the entry's content (edited)"};
    return false;
  }
  expected_prev_ = e.hash;
  ++checked_;
  return true;
}

std::optional<ChainBreak> VerifyChain(const std::vector<StoredAuditEntry>& entries,
                                      std::string_view anchor) {
  AuditChainVerifier v{std::string(anchor)};
  for (const auto& e : entries) {
    if (!v.Add(e)) break;
  }
  return v.broken();
}

}  // namespace kiln::common
