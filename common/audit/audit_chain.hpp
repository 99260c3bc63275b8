// The audit trail's hash chain: how each entry is linked to the one before it,
// and how a chain (or what is left of it after trimming) is verified.
//
//   std::string hash = EntryHash(prev_hash, entry);  // SHA-256(prev + "\n" + canonical JSON)
//   std::optional<ChainBreak> b = VerifyChain(stored, anchor);  // nullopt: intact
//
// Each stored entry carries `prev` (the hash of the entry before it; kAuditGenesis
// for the very first) and `hash`. Verification starts at the first entry still
// kept: its `prev` must equal the anchor (kAuditGenesis, or what trimming
// recorded), every later `prev` must equal the hash before it, and every `hash`
// must be the link hash of its own prev and entry text. So an edited entry
// fails at its own index, a deleted one at the index where it was, and a
// trimmed chain still verifies. The chain proves order and integrity against
// anyone who cannot rewrite every later entry too; docs/audit.md says more.
// Pure functions and plain data; AuditChainVerifier is used by one thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/audit/audit_entry.hpp"
#include "common/status.hpp"

namespace kiln::common {

// The `prev` of the first entry ever appended.
inline constexpr std::string_view kAuditGenesis =
    "0000000000000000000000000000000000000000000000000000000000000000";

// SHA-256 hex of prev_hash + "\n" + canonical_entry.
std::string AuditLinkHash(std::string_view prev_hash, std::string_view canonical_entry);
// AuditLinkHash(prev_hash, entry.Canonical()).
std::string EntryHash(std::string_view prev_hash, const AuditEntry& entry);

// One entry as stored (a stream entry of AuditStore) or exported.
struct StoredAuditEntry {
  std::string id;     // stream id, e.g. "1718000000000-0"
  std::string entry;  // the canonical JSON text the hash covers
  std::string prev;
  std::string hash;

  // {"id","prev","hash","entry": <the entry as a JSON object>} for JSON-lines
  // export; an entry text that is not JSON is exported as a string.
  nlohmann::json ToExportJson() const;
  // The inverse: the entry object is re-serialised canonically, which gives the
  // stored text back for every entry the broker wrote.
  static StatusOr<StoredAuditEntry> FromExportJson(const nlohmann::json& j);
};

struct ChainBreak {
  uint64_t index = 0;  // position among the entries verified, 0 = the first kept
  std::string id;      // its stream id
  std::string reason;
};

// Verifies a chain entry by entry, e.g. page by page from Redis.
class AuditChainVerifier {
 public:
  explicit AuditChainVerifier(std::string anchor = std::string(kAuditGenesis))
      : expected_prev_(std::move(anchor)) {}

  // False at the first broken link, and on every call after it.
  bool Add(const StoredAuditEntry& e);

  const std::optional<ChainBreak>& broken() const { return broken_; }
  uint64_t checked() const { return checked_; }  // entries accepted as intact
  // The hash the next entry's prev must equal.
  const std::string& expected_prev() const { return expected_prev_; }

 private:
  std::string expected_prev_;
  uint64_t checked_ = 0;
  std::optional<ChainBreak> broken_;
};

std::optional<ChainBreak> VerifyChain(const std::vector<StoredAuditEntry>& entries,
                                      std::string_view anchor = kAuditGenesis);

}  // namespace kiln::common
