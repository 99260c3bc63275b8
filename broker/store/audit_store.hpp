// AuditStore: the audit trail in Redis, a hash-chained stream that every
// broker appends to (chain rules in common/audit/audit_chain.hpp).
//
//   AuditStore audit(pool, /*max_entries=*/100000);
//   ASSIGN_OR_RETURN(std::string id, audit.Append(MakeAuditEntry(spec, record, "auto")));
//   ASSIGN_OR_RETURN(AuditStore::VerifyReport report, audit.Verify());
//
// Keys (hash tag {kiln}, so the scripts stay atomic on a cluster slot):
//   {kiln}:audit         stream  one entry per execution: fields entry (canonical
//                                JSON), prev, hash
//   {kiln}:audit:head    string  hash of the last appended entry (absent: genesis)
//   {kiln}:audit:anchor  string  prev of the first kept entry, written when
//                                trimming (absent: genesis)
//   {kiln}:audit:pending zset    ids of ended jobs whose entry is not written yet,
//                                scored by end time (ms). The scripts that store a
//                                job's end add it in the same step (Finish,
//                                JobStore::CreateEnded); the append that writes its
//                                entry removes it. So a broker that dies between
//                                the two leaves the id behind, and AuditWriter's
//                                sweep (any broker) writes the entry later:
//                                exactly one entry per job, never none.
// Append: the link hash (SHA-256 over up to 1 MiB of code) is computed here,
// not in Lua: Redis scripts have no SHA-256, and hashing there would stall the
// one Redis thread every broker shares. A script then appends only if the head
// is still the prev the hash was built on, else answers the current head and
// the append is retried on it (compare-and-append), with a growing random
// pause after a few losses so a CPU-starved broker is not beaten forever. Appends of one AuditStore
// are serialised, so only brokers race with each other; each lost race means
// another broker's append went through. Round trips: 1 per attempt (the head
// is remembered between appends), or per batch of AppendMany (one script
// run); Read 1; Trim 1; Verify 1 per page.
// Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "broker/job/job.hpp"
#include "broker/store/redis_connection.hpp"
#include "broker/store/redis_keys.hpp"
#include "common/audit/audit_chain.hpp"
#include "common/audit/audit_entry.hpp"
#include "common/status.hpp"

namespace kiln::broker {

class AuditStore {
 public:
  static constexpr const char* kStreamKey = keys::kAudit;
  static constexpr const char* kHeadKey = keys::kAuditHead;
  static constexpr const char* kAnchorKey = keys::kAuditAnchor;
  static constexpr const char* kPendingKey = keys::kAuditPending;
  static constexpr int kMaxAttempts = 100;
  static constexpr size_t kMaxBatch = 64;  // entries per round trip

  // max_entries: retention; each append trims the stream to about that many
  // entries (Redis's "~": whole stream nodes, so up to ~100 more). 0: keep all.
  AuditStore(RedisPool* pool, uint64_t max_entries)
      : pool_(pool), max_entries_(std::to_string(max_entries)) {}

  // Appends one entry at the end of the chain and takes its job off the
  // pending set; returns its stream id. With only_if_pending, appends only
  // while entry.job_id is pending and answers "" otherwise (another broker
  // wrote it already). UNAVAILABLE when the head kept moving kMaxAttempts times.
  common::StatusOr<std::string> Append(const common::AuditEntry& entry,
                                       bool only_if_pending = false);
  // Appends `entries` in order, up to kMaxBatch per round trip: each one's
  // hash is chained on the one before it here and one script run appends
  // them all. If the head moved, the batch goes again on the head the script
  // answered; a job no longer pending breaks the chain there, and the rest
  // go again after it. Each entry answers as Append would. An error (Redis away or
  // refusing) answers every entry not known to be appended, though some of
  // them may be: retry those with only_if_pending.
  std::vector<common::StatusOr<std::string>> AppendMany(
      const std::vector<common::AuditEntry>& entries, bool only_if_pending = false);

  // Ids of jobs pending since before `ended_before_ms`, oldest first.
  common::StatusOr<std::vector<std::string>> Pending(int64_t ended_before_ms, size_t limit);
  // Gives up on a pending job (its record expired before its entry was written).
  common::Status DropPending(const std::string& job_id);

  // Entries and the keys that describe them, read in one script (one snapshot).
  struct Page {
    std::vector<common::StoredAuditEntry> entries;
    std::string anchor;  // the prev the oldest kept entry must carry
    std::string head;    // the hash of the newest entry at the time of the read
  };
  // Up to `count` entries after stream id `after_id` ("" reads from the start).
  common::StatusOr<Page> Read(const std::string& after_id, size_t count);

  // Keeps the newest keep_last_n entries and records the anchor, so the rest
  // still verifies. Returns how many entries were removed.
  common::StatusOr<uint64_t> Trim(uint64_t keep_last_n);

  struct VerifyReport {
    uint64_t checked = 0;                      // intact entries before any break
    std::optional<common::ChainBreak> broken;  // nullopt: the whole chain is intact
    // broken->id is empty when entries are missing at the end.
  };
  // Walks the whole stream, page by page, and checks that the head names the
  // last entry (so deleting the newest entries is seen too). Entries appended
  // during the walk are verified too. A trim that overtakes the walk
  // (max_entries appends meanwhile) shows up as a break: verify again.
  common::StatusOr<VerifyReport> Verify(size_t page_size = 500);

 private:
  RedisPool* pool_;
  std::string max_entries_;
  std::mutex append_mu_;   // serialises Append; guards head_hint_
  std::string head_hint_;  // the head after our last append ("" before the first)
};

// The audit entry of a finished job: digests of code, input and output, the
// head of the (already filtered) stdout. approval: "auto", "admin:<name>" or "none".
common::AuditEntry MakeAuditEntry(const JobSpec& spec, const JobRecord& record,
                                  std::string approval);

}  // namespace kiln::broker
