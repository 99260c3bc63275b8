#include "broker/store/audit_store.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include "common/audit/sha256.hpp"

namespace kiln::broker {
namespace {

// Shared by the scripts: the value of `name` in a stream entry's flat field list.
constexpr const char* kFieldFunction = R"lua(
local function field(fields, name)
  for i = 1, #fields, 2 do
    if fields[i] == name then return fields[i + 1] end
  end
  return ''
end
)lua";

// ARGV: stream, head, anchor and pending keys, prev, max_entries, genesis,
// only-if-pending ('1'/'0'), then per entry its job id, entry and hash, each
// hash chained on the one before it (the first on prev). Appends them in
// order while the head is still prev; with only-if-pending, stops after the
// first entry whose job is not pending (the rest were chained on it).
// Returns {0, current head} when prev is stale, else {1, id per entry tried}
// where a job not pending answers ''.
const RedisScript& AppendScript() {
  static const RedisScript s(std::string(kFieldFunction) + R"lua(
local stream, head_key, anchor_key, pending = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local prev, only_pending = ARGV[5], ARGV[8] == '1'
local head = redis.call('GET', head_key) or ARGV[7]
if head ~= prev then return {0, head} end
local out, done = {1}, {}
for i = 9, #ARGV, 3 do
  if only_pending and not redis.call('ZSCORE', pending, ARGV[i]) then
    out[#out + 1] = ''
    break
  end
  out[#out + 1] = redis.call('XADD', stream, '*', 'entry', ARGV[i + 1], 'prev', prev, 'hash', ARGV[i + 2])
  prev = ARGV[i + 2]
  done[#done + 1] = ARGV[i]
end
if #done == 0 then return out end
redis.call('SET', head_key, prev)
redis.call('ZREM', pending, unpack(done))
local max = tonumber(ARGV[6])
if max > 0 and redis.call('XTRIM', stream, 'MAXLEN', '~', max) > 0 then
  local first = redis.call('XRANGE', stream, '-', '+', 'COUNT', 1)[1]
  redis.call('SET', anchor_key, field(first[2], 'prev'))
end
return out
)lua");
  return s;
}

// KEYS: stream, head, anchor. ARGV: keep, genesis. Returns the entries removed.
const std::string kTrimScript = std::string(kFieldFunction) + R"lua(
local removed = redis.call('XTRIM', KEYS[1], 'MAXLEN', ARGV[1])
if removed > 0 then
  local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)[1]
  local anchor
  if first then
    anchor = field(first[2], 'prev')
  else
    anchor = redis.call('GET', KEYS[2]) or ARGV[2]
  end
  redis.call('SET', KEYS[3], anchor)
end
return removed
)lua";

// KEYS: stream, head, anchor. ARGV: first id for XRANGE ("-" or "(<id>"), count.
// Returns {anchor or '', head or '', entries}: one snapshot, so a concurrent
// append or trim cannot fall between the entries and the keys that describe them.
constexpr const char* kReadScript = R"lua(
return {redis.call('GET', KEYS[3]) or '', redis.call('GET', KEYS[2]) or '',
        redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', ARGV[2])}
)lua";

const std::string kGenesis(common::kAuditGenesis);

// [[id, [field, value, ...]], ...] -> entries; a missing field stays empty (and fails
// verification).
common::StatusOr<std::vector<common::StoredAuditEntry>> ParseEntries(const RedisReply& r) {
  std::vector<common::StoredAuditEntry> out;
  if (r.type != RedisReply::Type::kArray) return out;
  out.reserve(r.elements.size());
  for (const RedisReply& e : r.elements) {
    if (e.elements.size() != 2) return common::Internal("audit stream: malformed entry");
    common::StoredAuditEntry s;
    s.id = e.elements[0].str;
    const auto& f = e.elements[1].elements;
    for (size_t i = 0; i + 1 < f.size(); i += 2) {
      if (f[i].str == "entry") {
        s.entry = f[i + 1].str;
      } else if (f[i].str == "prev") {
        s.prev = f[i + 1].str;
      } else if (f[i].str == "hash") {
        s.hash = f[i + 1].str;
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

common::StatusOr<std::string> AuditStore::Append(const common::AuditEntry& entry,
                                                 bool only_if_pending) {
  return std::move(AppendMany({entry}, only_if_pending).front());
}

std::vector<common::StatusOr<std::string>> AuditStore::AppendMany(
    const std::vector<common::AuditEntry>& entries, bool only_if_pending) {
  std::vector<common::StatusOr<std::string>> out(entries.size(),
                                                 common::Internal("audit append: not sent"));
  std::vector<std::string> texts;
  texts.reserve(entries.size());
  for (const auto& e : entries) texts.push_back(e.Canonical());
  // Every entry not appended yet, from `from` on, answers `st`.
  auto fail_from = [&](size_t from, const common::Status& st) {
    for (size_t i = from; i < entries.size(); ++i) {
      out[i] = common::Status(st).WithContext("appending audit entry of " + entries[i].job_id);
    }
    return out;
  };
  std::lock_guard lock(append_mu_);
  std::string prev = head_hint_.empty() ? kGenesis : head_hint_;
  auto conn = pool_->Acquire();
  size_t next = 0;
  int lost = 0;
  while (next < entries.size()) {
    // The rest of the entries (a batch's worth), each chained on the one
    // before it, in one script run.
    const size_t end = std::min(entries.size(), next + kMaxBatch);
    std::vector<std::string> args = {
        kStreamKey, kHeadKey,     kAnchorKey, kPendingKey,
        prev,       max_entries_, kGenesis,   only_if_pending ? "1" : "0"};
    std::vector<std::string> hashes;
    args.reserve(args.size() + 3 * (end - next));
    hashes.reserve(end - next);
    for (size_t i = next; i < end; ++i) {
      const std::string& link = i == next ? prev : hashes.back();
      hashes.push_back(common::AuditLinkHash(link, texts[i]));
      args.push_back(entries[i].job_id);
      args.push_back(texts[i]);
      args.push_back(hashes.back());
    }
    auto r = conn->Eval(AppendScript(), args);
    if (!r.ok()) {
      head_hint_.clear();  // some may have gone in: the next append learns the head
      return fail_from(next, r.status());
    }
    if (r->type != RedisReply::Type::kArray || r->elements.size() < 2 ||
        r->elements.size() > 1 + (end - next)) {
      head_hint_.clear();
      return fail_from(next, common::Internal("audit append: unexpected reply"));
    }
    if (r->elements[0].integer == 0) {  // another broker appended first: chain onto its entry
      prev = r->elements[1].str;
      if (++lost >= kMaxAttempts) {
        head_hint_.clear();
        return fail_from(
            next, common::Unavailable("the chain head moved " + std::to_string(kMaxAttempts) +
                                      " times in a row"));
      }
      // A broker starved of CPU can lose every race to a busy one; after a
      // few losses, step aside for a random moment that grows with each loss.
      if (lost > 4) {
        thread_local std::minstd_rand rng{std::random_device{}()};
        const int cap_us = 50 << std::min(lost - 5, 6);
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % cap_us));
      }
      continue;
    }
    // One id per entry tried; '' for a job no longer pending, after which
    // the rest (chained on it) go again from the last one appended.
    for (size_t k = 1; k < r->elements.size(); ++k) {
      const size_t i = next + k - 1;
      out[i] = r->elements[k].str;
      if (!r->elements[k].str.empty()) prev = hashes[i - next];
    }
    head_hint_ = prev;  // the head the script found, or what it appended
    next += r->elements.size() - 1;
  }
  return out;
}

common::StatusOr<std::vector<std::string>> AuditStore::Pending(int64_t ended_before_ms,
                                                               size_t limit) {
  // "(" + to_string(...) trips GCC 12's -Wrestrict false positive at -O3.
  std::string below = "(";
  below += std::to_string(ended_before_ms);
  const std::string count = std::to_string(std::max<size_t>(limit, 1));
  auto conn = pool_->Acquire();
  ASSIGN_OR_RETURN(RedisReply r, conn->Command({"ZRANGE", kPendingKey, "-inf", below, "BYSCORE",
                                                "LIMIT", "0", count}));
  std::vector<std::string> ids;
  for (const auto& e : r.elements) ids.push_back(e.str);
  return ids;
}

common::Status AuditStore::DropPending(const std::string& job_id) {
  auto conn = pool_->Acquire();
  auto r = conn->Command({"ZREM", kPendingKey, job_id});
  return r.ok() ? common::Status::Ok() : r.status();
}

common::StatusOr<AuditStore::Page> AuditStore::Read(const std::string& after_id, size_t count) {
  const std::string n = std::to_string(std::max<size_t>(count, 1));
  const std::string from = after_id.empty() ? "-" : "(" + after_id;
  auto conn = pool_->Acquire();
  ASSIGN_OR_RETURN(RedisReply r, conn->Command({"EVAL", kReadScript, "3", kStreamKey, kHeadKey,
                                                kAnchorKey, from, n}));
  if (r.type != RedisReply::Type::kArray || r.elements.size() != 3) {
    return common::Internal("audit read: unexpected reply");
  }
  Page page;
  page.anchor = r.elements[0].str.empty() ? kGenesis : r.elements[0].str;
  page.head = r.elements[1].str.empty() ? kGenesis : r.elements[1].str;
  ASSIGN_OR_RETURN(page.entries, ParseEntries(r.elements[2]));
  return page;
}

common::StatusOr<uint64_t> AuditStore::Trim(uint64_t keep_last_n) {
  const std::string keep = std::to_string(keep_last_n);
  auto conn = pool_->Acquire();
  auto r =
      conn->Command({"EVAL", kTrimScript, "3", kStreamKey, kHeadKey, kAnchorKey, keep, kGenesis});
  if (!r.ok()) return r.status().WithContext("trimming the audit stream");
  return static_cast<uint64_t>(r->integer);
}

common::StatusOr<AuditStore::VerifyReport> AuditStore::Verify(size_t page_size) {
  page_size = std::max<size_t>(page_size, 1);
  ASSIGN_OR_RETURN(Page page, Read("", page_size));
  common::AuditChainVerifier verifier(page.anchor);
  // Pages are read until one is short: that page reached the end of the stream
  // in its snapshot, whose head must then be the last hash (so deleting the
  // newest entries is seen). Appends meanwhile only make the walk longer.
  while (true) {
    for (const auto& e : page.entries) {
      if (!verifier.Add(e)) return VerifyReport{verifier.checked(), verifier.broken()};
    }
    if (page.entries.size() < page_size) break;
    ASSIGN_OR_RETURN(page, Read(page.entries.back().id, page_size));
  }
  if (page.head != verifier.expected_prev()) {
    return VerifyReport{verifier.checked(),
                        common::ChainBreak{verifier.checked(), "",
                                           "the chain's head is not the last entry's hash (the "
                                           "newest entries were deleted)"}};
  }
  return VerifyReport{verifier.checked(), std::nullopt};
}

common::AuditEntry MakeAuditEntry(const JobSpec& spec, const JobRecord& record,
                                  std::string approval) {
  common::AuditEntry e;
  e.time_ms = record.finished_ms;
  e.tenant = spec.tenant;
  e.session_id = spec.session_id;
  e.runtime = spec.language;
  e.job_id = spec.id;
  e.code = spec.code;
  if (spec.excerpt_of) {  // a refused submission: the digests are of what was submitted
    e.code_sha256 = spec.excerpt_of->code_sha256;
    e.input_sha256 = spec.excerpt_of->input_sha256;
    e.code_bytes = spec.excerpt_of->code_bytes;
  } else {
    e.code_sha256 = common::Sha256Hex(spec.code);
    e.input_sha256 = common::Sha256Hex(spec.input_json);
  }
  e.output_sha256 =
      common::OutputDigest(record.stdout_data, record.stderr_data, record.result_json);
  e.stdout_head = common::Utf8Head(record.stdout_data, common::AuditEntry::kStdoutHeadChars);
  e.exit_code = record.exit_code;
  e.status = JobStatusName(record.status);
  if (record.duration_ms) e.duration_ms = std::llround(*record.duration_ms);
  e.approval = std::move(approval);
  e.redactions = record.redactions;
  e.worker = record.worker;
  e.warnings = record.warnings;
  if (record.network) e.network = record.network->ToJson();
  return e;
}

}  // namespace kiln::broker
