// JobStore: reading the job ledger in Redis, and the output streams. Jobs
// are written by ScheduleStore (created with their slots, ended with their
// release); only broker/store/ builds keys (docs/architecture.md, "Redis keys").
//
//   JobStore store(pool, /*ttl_s=*/86400);
//   ASSIGN_OR_RETURN(JobRecord rec, store.Load(id));  // with live status, worker, queue position
//
// Keys (one hash tag, {kiln}, so multi-key scripts stay atomic on a cluster):
//   {kiln}:job:<id>   hash  spec (JobSpec JSON), status, tenant, language,
//                           isolation, session, created_ms, warnings, worker,
//                           started_ms, epoch, ...: a live job's state, kept by
//                           the scheduling scripts; record (JobRecord JSON): the
//                           terminal record, written once when the job ends.
//                           Expires job_ttl_s after its last write.
//   {kiln}:out:<id>   stream  the job's output chunks (fields stream, seq,
//                           offset, data), for live and late subscribers (SSE);
//                           capped at kMaxChunksKept entries, expires with the job
//   The job hash keeps how far each stream is stored (out_stdout, out_stderr)
//   and the last seq (out_seq): chunks are stored only where they continue
//   their stream, and only while the job runs.
// Round trips: Load 1 (a script for the hash's fields and an HGET of the
// terminal record, pipelined), AppendOutput 1 for any number of jobs' chunks,
// ReadChunks 1 per poll of a subscriber.
// Thread-safe (each call leases its own connection from the pool).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "broker/job/job.hpp"
#include "broker/store/redis_connection.hpp"
#include "broker/store/redis_keys.hpp"
#include "common/status.hpp"

namespace kiln::broker {

// One job's output chunks, in order (as received, or coalesced).
struct JobOutput {
  std::string job_id;
  std::vector<common::protocol::OutputChunk> chunks;
  // The worker that sent the chunks: stored only while the job runs there.
  // Empty: the broker's own (the tail it completes from a Result).
  std::string worker;
};

// How much of a job's output is stored, after AppendOutput.
struct StoredOutput {
  bool running = true;   // false: the job has ended (or is unknown), nothing was stored
  bool foreign = false;  // the job runs on another worker than the sender: nothing was stored
  uint64_t stdout_bytes = 0;
  uint64_t stderr_bytes = 0;
  uint32_t entries = 0;  // stream entries this call added
};

class JobStore {
 public:
  JobStore(RedisPool* pool, uint64_t ttl_s)
      : pool_(pool), ttl_s_(std::to_string(ttl_s)), ttl_ms_(static_cast<int64_t>(ttl_s) * 1000) {}

  static std::string JobKey(const std::string& id) { return keys::Job(id); }

  // Stores a job that ended before it was admitted (blocked by policy): its
  // record is terminal from the start, and of its spec only the bounded
  // excerpt is kept (JobSpec::Excerpt; pass the excerpt the audit entry is
  // made from).
  common::Status CreateEnded(const JobSpec& spec, const JobRecord& record);
  // NOT_FOUND when the job is unknown or expired.
  common::StatusOr<JobRecord> Load(const std::string& id);

  // What a reader of a large record learns before reading it: whose it is,
  // its status and the size of its stored JSON (HMGET + HSTRLEN, 1 round
  // trip). A terminal record's stored JSON is the record as clients see it
  // (written by ToJson): RecordText (HGET, 1 round trip) then answers it
  // without parsing and serializing it again (a record holds up to
  // max_output_bytes of output, and each copy costs that).
  struct Peek {
    JobStatus status = JobStatus::kQueued;
    std::string tenant;
    size_t record_bytes = 0;  // 0 until the job has ended
  };
  common::StatusOr<Peek> PeekRecord(const std::string& id);
  common::StatusOr<std::string> RecordText(const std::string& id);
  common::StatusOr<JobSpec> LoadSpec(const std::string& id);
  // How the job was approved: "auto", "trusted_session", "admin:<name>" or "none".
  common::StatusOr<std::string> Approval(const std::string& id);

  // GET /v1/executions: a tenant's executions, newest first, from its list
  // (keys::TenantJobs: a stream with an entry per job, trimmed to the jobs
  // whose records are kept). One script (1 round trip) looks at up to
  // kListScanBudget entries, so a page with filters that match little may
  // hold fewer than `limit` entries and still have a next cursor. Entries
  // whose job hash has expired are deleted on the way.
  struct ListQuery {
    std::string tenant;
    std::string session_key;            // empty: any session or none
    std::vector<std::string> statuses;  // empty: any
    int64_t since_ms = 0;               // stored at or after (the entry's time, Redis' clock)
    int64_t until_ms = 0;               // stored before; 0: no bound
    std::string cursor;                 // a previous page's next_cursor; empty: the newest
    size_t limit = 20;
  };
  struct ListEntry {
    std::string id;
    std::string status;
    std::string language;
    std::string session_key;  // empty: none
    int64_t created_ms = 0;
    int64_t started_ms = 0;   // 0: not started
    int64_t finished_ms = 0;  // 0: not ended
  };
  struct ListPage {
    std::vector<ListEntry> entries;
    std::string next_cursor;  // empty: nothing older matches
  };
  static constexpr size_t kListScanBudget = 1000;
  common::StatusOr<ListPage> List(const ListQuery& query);
  // Whether `cursor` has the shape List hands out (a stream entry id).
  static bool IsListCursor(std::string_view cursor);

  // A tenant's usage per UTC day (GET /v1/usage; written by the finish
  // script and CreateEnded under keys::Usage): the days first_day..last_day
  // (day numbers, broker/store/usage_days.hpp), zeros where nothing ended.
  // One round trip.
  struct DayUsage {
    int64_t day = 0;
    uint64_t executions = 0;
    uint64_t cpu_us = 0;  // microseconds: many short jobs add up
    uint64_t output_bytes = 0;
  };
  common::StatusOr<std::vector<DayUsage>> Usage(const std::string& tenant, int64_t first_day,
                                                int64_t last_day);

  // A tool call, or its answer, on the same stream (ToolStore puts them
  // there): shown to the job's followers between its chunks.
  struct StoredTool {
    bool answer = false;         // a tool_result entry; else a tool_call
    std::string call_id;         // "c<n>"
    std::string name;            // tool_call
    std::string arguments_json;  // tool_call
    bool ok = false;             // tool_result
  };
  struct StoredChunk {
    std::string event_id;  // the stream entry id: SSE ids and Last-Event-ID
    common::protocol::OutputChunk chunk;
    std::optional<StoredTool> tool;  // set: a tool entry, `chunk` is empty
  };
  static constexpr size_t kMaxChunksKept = 10000;
  static std::string OutputKey(const std::string& id) { return keys::Output(id); }
  // Stores each job's chunks where they continue its stored streams: a
  // chunk that would leave a gap is dropped, one that overlaps keeps only its
  // new bytes, and nothing is stored once the job has ended (its record then
  // holds the output). Entries keep at most kMaxChunkBytes. One script per
  // job, all in one round trip; the reply gives each job's stored ends.
  common::StatusOr<std::vector<StoredOutput>> AppendOutput(const std::vector<JobOutput>& jobs);
  // What a job about to end must still store of the record's output so its
  // stream holds the whole output before the end (chunks lost on the way,
  // or dropped under a flood): the bytes past `known`, what this broker last
  // saw stored (Redis trims any overlap). No chunks: nothing is missing.
  static JobOutput OutputTail(const JobRecord& record, const StoredOutput& known);
  common::Status AppendChunk(const common::protocol::OutputChunk& chunk) {
    return AppendOutput({JobOutput{chunk.job_id, {chunk}}}).status();
  }
  // Chunks after `after_id` ("0" for all), waiting up to block_ms for the
  // first one (block_ms < 0: do not wait). Uses the caller's own connection: a subscriber blocks on
  // it.
  // The entries of one stream in an XREAD/XRANGE reply:
  // [[entry-id, [field, value, ...]], ...].
  static std::vector<StoredChunk> ParseEntries(const std::string& id, const RedisReply& entries);
  // The output a running job has stored so far, for its record: the first
  // `max_bytes` of stdout and stderr together, in stream order; `more` when
  // the stream holds bytes past them. Reads at most kMaxOutputPages pages
  // of 256 entries (an XREAD each), so a stream of many tiny chunks is cut
  // there too (with `more`).
  struct OutputSoFar {
    std::string stdout_data;
    std::string stderr_data;
    bool more = false;
  };
  static constexpr size_t kMaxOutputPages = 16;
  common::StatusOr<OutputSoFar> ReadOutputSoFar(const std::string& id, size_t max_bytes);
  static common::StatusOr<std::vector<StoredChunk>> ReadChunks(RedisConnection* conn,
                                                               const std::string& id,
                                                               const std::string& after_id,
                                                               int block_ms);

 private:
  RedisPool* pool_;
  std::string ttl_s_;
  int64_t ttl_ms_;
};

}  // namespace kiln::broker
