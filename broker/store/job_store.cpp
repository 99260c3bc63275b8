#include "broker/store/job_store.hpp"

#include <algorithm>

#include "broker/store/audit_store.hpp"
#include "broker/store/list_scripts.hpp"
#include "broker/store/output_scripts.hpp"
#include "broker/store/schedule_scripts.hpp"
#include "broker/store/usage_days.hpp"
#include "common/json/bounded_json.hpp"
#include "common/protocol/session_key.hpp"

namespace kiln::broker {
common::Status JobStore::CreateEnded(const JobSpec& full_or_excerpt, const JobRecord& record) {
  const JobSpec spec = full_or_excerpt.Excerpt();  // what is refused is not kept whole
  const std::string key = JobKey(spec.id);
  const std::string usage_key = keys::Usage(
      spec.tenant,
      UtcDateOf(UtcDayOf(record.finished_ms > 0 ? record.finished_ms : spec.created_ms)));
  auto conn = pool_->Acquire();
  // One transaction: the record and the audit entry it is owed (AuditStore,
  // "pending") exist together or not at all.
  std::vector<std::vector<std::string>> commands = {
      {"MULTI"},
      {"HSET", key, "spec", common::DumpJson(spec.ToJson()), "record",
       common::DumpJson(record.ToJson()), "status", JobStatusName(record.status), "tenant",
       spec.tenant, "approval", "none"},
      {"EXPIRE", key, ttl_s_},
      {"ZADD", AuditStore::kPendingKey, std::to_string(record.finished_ms), spec.id},
      {"XADD", keys::TenantJobs(spec.tenant), "MINID", "~",
       std::to_string(std::max<int64_t>(0, spec.created_ms - ttl_ms_)), "*", "id", spec.id},
      // Counted in the day's usage like every ended job (the finish script).
      {"HINCRBY", usage_key, "executions", "1"},
      {"EXPIRE", usage_key, std::to_string(kUsageDaysKept * 86400)}};
  // Its end goes to its callback_url like any other job's (the finish script).
  if (!spec.callback_url.empty()) {
    commands.push_back(
        {"ZADD", keys::kWebhooks, "NX", std::to_string(record.finished_ms), spec.id});
  }
  commands.push_back({"EXEC"});
  auto r = conn->Pipeline(commands);
  if (r.ok() && r->back().type != RedisReply::Type::kArray) {
    return common::Internal("redis: the transaction storing job " + spec.id + " was discarded");
  }
  return r.ok() ? common::Status::Ok() : r.status().WithContext("storing job " + spec.id);
}

common::StatusOr<JobStore::Peek> JobStore::PeekRecord(const std::string& id) {
  auto conn = pool_->Acquire();
  ASSIGN_OR_RETURN(auto r, conn->Pipeline({{"HMGET", JobKey(id), "status", "tenant"},
                                           {"HSTRLEN", JobKey(id), "record"}}));
  const RedisReply& fields = r[0];
  if (fields.elements.size() != 2 || fields.elements[0].is_nil()) {
    return common::NotFound("no execution with id " + id);
  }
  auto status = ParseJobStatus(fields.elements[0].str);
  if (!status.ok()) {
    return common::Internal("stored status of " + id + ": " + status.status().message());
  }
  return Peek{*status, fields.elements[1].str, static_cast<size_t>(r[1].integer)};
}

common::StatusOr<std::string> JobStore::RecordText(const std::string& id) {
  auto conn = pool_->Acquire();
  ASSIGN_OR_RETURN(RedisReply r, conn->Command({"HGET", JobKey(id), "record"}));
  if (r.is_nil()) return common::NotFound("no execution with id " + id);
  return std::move(r.str);
}

common::StatusOr<JobRecord> JobStore::Load(const std::string& id) {
  auto conn = pool_->Acquire();
  // The hash's fields (a script), then the terminal record with a plain
  // HGET in the same round trip, read after them so it is at least as new.
  // The record is not passed through Lua: for a record of 9.5 MiB that costs
  // Redis ~90 ms against ~9 ms for HGET, and Redis serves no one meanwhile.
  const std::vector<std::vector<std::string>> commands = {
      {"EVALSHA", scripts::Load().sha1, "0", id}, {"HGET", JobKey(id), "record"}};
  auto replies = conn->Pipeline(commands);
  if (!replies.ok() && replies.status().message().find("NOSCRIPT") != std::string::npos) {
    RETURN_IF_ERROR(conn->Eval(scripts::Load(), {id}).status());  // Redis learns the script
    replies = conn->Pipeline(commands);
  }
  if (!replies.ok()) return replies.status();
  const RedisReply& live = (*replies)[0];
  const RedisReply& stored = (*replies)[1];
  if (live.is_nil()) return common::NotFound("no execution with id " + id);
  if (live.elements.size() != 12) return common::Internal("redis: unexpected reply loading " + id);
  const auto field = [&](size_t i) -> const std::string& { return live.elements[i].str; };
  ASSIGN_OR_RETURN(JobStatus status, ParseJobStatus(field(0)));
  // An ended job is its record, written once by whoever ended it.
  if (IsTerminal(status)) {
    if (stored.is_nil()) return common::Internal("job " + id + " ended without a record");
    auto j = common::ParseJson(stored.str);
    if (!j.ok()) return common::Internal("stored record of " + id + ": " + j.status().message());
    return JobRecord::FromJson(*j);
  }
  // A live job is the hash's fields, which the scheduling scripts keep.
  JobRecord record;
  record.id = id;
  record.status = status;
  record.tenant = field(6);
  record.session_id = std::string(common::protocol::SessionIdOf(field(7)));
  record.language = field(8);
  record.isolation = field(9).empty() ? std::string(kStandardIsolation) : field(9);
  record.created_ms = std::strtoll(field(10).c_str(), nullptr, 10);
  if (!field(11).empty()) {
    auto warnings = common::ParseJson(field(11));
    if (!warnings.ok() || !warnings->is_array()) {
      return common::Internal("stored warnings of " + id + " are not a JSON array");
    }
    for (const auto& w : *warnings) {
      if (w.is_string()) record.warnings.push_back(w.get<std::string>());
    }
  }
  if (record.status == JobStatus::kRunning) {
    record.worker = field(1);
    record.started_ms = std::strtoll(field(2).c_str(), nullptr, 10);
    if (record.started_ms > 0) {
      record.queued_ms = static_cast<double>(record.started_ms - record.created_ms);
    }
  }
  if (auto epoch = SessionEpoch::Parse(field(3))) {
    record.session_epoch = epoch->generation;
    record.session_incarnation = epoch->incarnation;
  }
  if (record.status == JobStatus::kQueued) {
    if (live.elements[4].integer > 0) record.queue_position = live.elements[4].integer;
    record.wait_reason = field(5);
  }
  return record;
}

common::StatusOr<JobSpec> JobStore::LoadSpec(const std::string& id) {
  auto conn = pool_->Acquire();
  ASSIGN_OR_RETURN(RedisReply r, conn->Command({"HGET", JobKey(id), "spec"}));
  if (r.is_nil()) return common::NotFound("no execution with id " + id);
  auto j = common::ParseJson(r.str);
  if (!j.ok()) return common::Internal("stored spec of " + id + ": " + j.status().message());
  return JobSpec::FromJson(*j);
}

common::StatusOr<std::string> JobStore::Approval(const std::string& id) {
  auto conn = pool_->Acquire();
  ASSIGN_OR_RETURN(RedisReply r, conn->Command({"HGET", JobKey(id), "approval"}));
  return r.is_nil() || r.str.empty() ? std::string("none") : r.str;
}

common::StatusOr<std::vector<StoredOutput>> JobStore::AppendOutput(
    const std::vector<JobOutput>& jobs) {
  std::vector<std::vector<std::string>> commands;
  commands.reserve(jobs.size());
  const std::string max_kept = std::to_string(kMaxChunksKept);
  for (const JobOutput& j : jobs) {
    std::vector<std::string> argv = {
        "EVALSHA", scripts::AppendOutput().sha1, "0", j.job_id, ttl_s_, max_kept, j.worker};
    argv.reserve(argv.size() + 4 * j.chunks.size());
    for (const auto& c : j.chunks) {
      argv.push_back(c.stream == common::protocol::Stream::kStderr ? "stderr" : "stdout");
      argv.push_back(std::to_string(c.seq));
      argv.push_back(std::to_string(c.offset));
      argv.push_back(c.data);
    }
    commands.push_back(std::move(argv));
  }
  if (commands.empty()) return std::vector<StoredOutput>{};
  auto conn = pool_->Acquire();
  auto replies = conn->Pipeline(commands);
  if (!replies.ok() && replies.status().message().find("NOSCRIPT") != std::string::npos) {
    // Redis learns the script (a restarted Redis forgets it).
    RETURN_IF_ERROR(conn->Command({"SCRIPT", "LOAD", scripts::AppendOutput().text}).status());
    replies = conn->Pipeline(commands);
  }
  if (!replies.ok()) return replies.status().WithContext("storing output");
  std::vector<StoredOutput> out;
  out.reserve(replies->size());
  for (const RedisReply& r : *replies) {
    if (r.elements.size() != 3) return common::Internal("redis: unexpected reply storing output");
    StoredOutput s;
    s.running = r.elements[0].integer >= 0;
    s.foreign = r.elements[0].integer == -2;
    s.stdout_bytes = static_cast<uint64_t>(std::max<long long>(r.elements[0].integer, 0));
    s.stderr_bytes = static_cast<uint64_t>(std::max<long long>(r.elements[1].integer, 0));
    s.entries = static_cast<uint32_t>(std::max<long long>(r.elements[2].integer, 0));
    out.push_back(s);
  }
  return out;
}

JobOutput JobStore::OutputTail(const JobRecord& record, const StoredOutput& known) {
  JobOutput tail{record.id, {}};
  auto add = [&](common::protocol::Stream stream, const std::string& text, uint64_t from) {
    if (text.size() <= from) return;
    // seq 0: Redis numbers it after the last stored one.
    tail.chunks.push_back(
        common::protocol::OutputChunk{record.id, stream, 0, from, text.substr(from)});
  };
  add(common::protocol::Stream::kStdout, record.stdout_data, known.stdout_bytes);
  add(common::protocol::Stream::kStderr, record.stderr_data, known.stderr_bytes);
  return tail;
}

common::StatusOr<std::vector<JobStore::StoredChunk>> JobStore::ReadChunks(
    RedisConnection* conn, const std::string& id, const std::string& after_id, int block_ms) {
  const std::string key = OutputKey(id);
  const std::string block = std::to_string(block_ms);
  std::vector<std::string_view> argv = {"XREAD", "COUNT", "256"};
  if (block_ms >= 0) {
    argv.push_back("BLOCK");
    argv.push_back(block);
  }
  for (std::string_view a :
       {std::string_view("STREAMS"), std::string_view(key), std::string_view(after_id)}) {
    argv.push_back(a);
  }
  ASSIGN_OR_RETURN(RedisReply r, conn->Command(argv));
  // [[key, [[entry-id, [field, value, ...]], ...]]]; nil on a timeout.
  if (r.type != RedisReply::Type::kArray || r.elements.empty() ||
      r.elements[0].elements.size() != 2) {
    return std::vector<StoredChunk>{};
  }
  return ParseEntries(id, r.elements[0].elements[1]);
}

bool JobStore::IsListCursor(std::string_view cursor) {
  // A stream entry id: <ms>-<seq>.
  const size_t dash = cursor.find('-');
  if (dash == 0 || dash == std::string_view::npos || dash > 20 || cursor.size() - dash - 1 == 0 ||
      cursor.size() - dash - 1 > 20) {
    return false;
  }
  for (size_t i = 0; i < cursor.size(); ++i) {
    if (i != dash && (cursor[i] < '0' || cursor[i] > '9')) return false;
  }
  return true;
}

common::StatusOr<JobStore::ListPage> JobStore::List(const ListQuery& q) {
  // XREVRANGE bounds: an id alone is its ms with any sequence number; '('
  // excludes the id given.
  std::string newest = "+";
  if (!q.cursor.empty()) {
    newest = "(" + q.cursor;
  } else if (q.until_ms > 0) {
    newest = std::to_string(q.until_ms - 1);
  }
  // A cursor past `until` is fine: the cursor is older still.
  const std::string oldest = q.since_ms > 0 ? std::to_string(q.since_ms) : "-";
  std::vector<std::string> args = {
      q.tenant,     newest, oldest, std::to_string(kListScanBudget), std::to_string(q.limit),
      q.session_key};
  args.insert(args.end(), q.statuses.begin(), q.statuses.end());
  auto conn = pool_->Acquire();
  ASSIGN_OR_RETURN(RedisReply r, conn->Eval(scripts::ListJobs(), args));
  if (r.elements.size() != 2) return common::Internal("redis: unexpected reply listing jobs");
  ListPage page;
  const auto number = [](const std::string& s) { return std::strtoll(s.c_str(), nullptr, 10); };
  for (const RedisReply& e : r.elements[0].elements) {
    if (e.elements.size() != 7) return common::Internal("redis: unexpected job in a list");
    page.entries.push_back({e.elements[0].str, e.elements[1].str, e.elements[2].str,
                            e.elements[3].str, number(e.elements[4].str), number(e.elements[5].str),
                            number(e.elements[6].str)});
  }
  page.next_cursor = r.elements[1].str;
  return page;
}

common::StatusOr<std::vector<JobStore::DayUsage>> JobStore::Usage(const std::string& tenant,
                                                                  int64_t first_day,
                                                                  int64_t last_day) {
  std::vector<std::vector<std::string>> commands;
  for (int64_t day = first_day; day <= last_day; ++day) {
    commands.push_back(
        {"HMGET", keys::Usage(tenant, UtcDateOf(day)), "executions", "cpu_us", "output_bytes"});
  }
  auto conn = pool_->Acquire();
  ASSIGN_OR_RETURN(auto replies, conn->Pipeline(commands));
  std::vector<DayUsage> out;
  const auto number = [](const RedisReply& r) { return std::strtoull(r.str.c_str(), nullptr, 10); };
  for (size_t i = 0; i < replies.size(); ++i) {
    const auto& f = replies[i].elements;
    if (f.size() != 3) return common::Internal("redis: unexpected reply reading usage");
    out.push_back({first_day + static_cast<int64_t>(i), number(f[0]), number(f[1]), number(f[2])});
  }
  return out;
}

common::StatusOr<JobStore::OutputSoFar> JobStore::ReadOutputSoFar(const std::string& id,
                                                                  size_t max_bytes) {
  auto lease = pool_->Acquire();
  RedisConnection* conn = lease.operator->();
  OutputSoFar out;
  std::string after = "0";
  for (size_t page = 0; page < kMaxOutputPages; ++page) {
    ASSIGN_OR_RETURN(auto chunks, ReadChunks(conn, id, after, -1));
    if (chunks.empty()) return out;
    for (auto& sc : chunks) {
      if (sc.tool) continue;
      const size_t room = max_bytes - out.stdout_data.size() - out.stderr_data.size();
      std::string& to =
          sc.chunk.stream == common::protocol::Stream::kStderr ? out.stderr_data : out.stdout_data;
      to.append(sc.chunk.data, 0, std::min(room, sc.chunk.data.size()));
      if (sc.chunk.data.size() > room) {
        out.more = true;
        return out;
      }
    }
    after = chunks.back().event_id;
  }
  // Pages left unread: whether anything follows is one more look away.
  ASSIGN_OR_RETURN(auto rest, ReadChunks(conn, id, after, -1));
  out.more = !rest.empty();
  return out;
}

std::vector<JobStore::StoredChunk> JobStore::ParseEntries(const std::string& id,
                                                          const RedisReply& entries) {
  std::vector<StoredChunk> out;
  for (const RedisReply& e : entries.elements) {
    if (e.elements.size() != 2) continue;
    StoredChunk sc;
    sc.event_id = e.elements[0].str;
    sc.chunk.job_id = id;
    const auto& f = e.elements[1].elements;
    if (f.size() >= 2 && f[0].str == "stream" &&
        (f[1].str == "tool_call" || f[1].str == "tool_result")) {
      StoredTool t;
      t.answer = f[1].str == "tool_result";
      for (size_t i = 2; i + 1 < f.size(); i += 2) {
        if (f[i].str == "call") t.call_id = f[i + 1].str;
        if (f[i].str == "name") t.name = f[i + 1].str;
        if (f[i].str == "arguments") t.arguments_json = f[i + 1].str;
        if (f[i].str == "ok") t.ok = f[i + 1].str == "1";
      }
      sc.tool = std::move(t);
      out.push_back(std::move(sc));
      continue;
    }
    for (size_t i = 0; i + 1 < f.size(); i += 2) {
      if (f[i].str == "stream") {
        sc.chunk.stream = f[i + 1].str == "stderr" ? common::protocol::Stream::kStderr
                                                   : common::protocol::Stream::kStdout;
      } else if (f[i].str == "seq") {
        sc.chunk.seq = std::strtoull(f[i + 1].str.c_str(), nullptr, 10);
      } else if (f[i].str == "offset") {
        sc.chunk.offset = std::strtoull(f[i + 1].str.c_str(), nullptr, 10);
      } else if (f[i].str == "data") {
        sc.chunk.data = f[i + 1].str;
      }
    }
    out.push_back(std::move(sc));
  }
  return out;
}

}  // namespace kiln::broker
