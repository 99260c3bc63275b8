// The broker's model of one execution job: the validated request (JobSpec)
// and what clients read back (JobRecord), with their JSON forms.
//
//   JobRecord rec = JobRecord::Queued(spec);
//   std::string body = rec.ToJson().dump();
//
// The JSON of JobRecord is the execution record of docs/api.md; the JSON of
// JobSpec is what the broker keeps in Redis to dispatch the job. Plain data:
// any thread.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "broker/job/isolation.hpp"
#include "broker/tools/tool_spec.hpp"
#include "common/network_policy.hpp"
#include "common/protocol/messages.hpp"
#include "common/status.hpp"

namespace kiln::broker {

enum class JobStatus {
  kQueued,
  kAwaitingApproval,
  kRunning,
  kSucceeded,
  kFailed,
  kTimedOut,
  kMemoryExceeded,
  kCancelled,
  kRejected,
  kError,
};

const char* JobStatusName(JobStatus s);
common::StatusOr<JobStatus> ParseJobStatus(std::string_view s);
bool IsTerminal(JobStatus s);

// A refused submission keeps at most this much of its code (JobSpec::Excerpt).
inline constexpr size_t kCodeExcerptBytes = 4096;

// What a refused submission was, when only an excerpt of it is kept.
struct SubmittedDigest {
  uint64_t code_bytes = 0;   // size of the submitted code
  std::string code_sha256;   // of the submitted code
  std::string input_sha256;  // of the submitted input JSON text ("" when none)
  friend bool operator==(const SubmittedDigest&, const SubmittedDigest&) = default;
};

struct JobSpec {
  std::string id;
  std::string tenant;
  std::string language;
  // The tenant's isolation level at submit (broker/job/isolation.hpp): kept
  // with the spec, so a queued or re-dispatched job keeps it.
  std::string isolation = std::string(kStandardIsolation);
  std::string code;
  std::string session_id;
  std::string conversation_id;        // groups sessions (MCP conversations); with session_id only
  uint32_t priority = 0;              // 0-9: higher runs first within the tenant's queue
  std::vector<std::string> warnings;  // policy rules that warned (kept in the record)
  std::string input_json;             // compact JSON object text, or empty
  std::map<std::string, std::string> env;
  std::vector<common::protocol::FileEntry> files;
  std::vector<std::string> collect;
  std::string stdin_data;  // what the program reads on fd 0 (<= kMaxStdinBytes)
  // Extra packages to install for the job (common/package_spec.hpp).
  std::vector<std::string> packages;
  // Network on request: `network` asked for (true or a list); once admitted,
  // network_allow holds the destinations the job may reach (the request's
  // list, or its tenant's whole allowlist) and the caps are its tenant's.
  bool network = false;
  std::vector<std::string> network_allow;
  uint64_t network_max_bytes = 0;
  uint64_t network_max_connections = 0;
  common::protocol::Limits limits;
  bool wait = true;
  int64_t created_ms = 0;
  // Where its record is POSTed when it ends (docs/api.md, "Webhooks"); empty:
  // nowhere. Checked against the tenant's webhooks.allow at submit.
  std::string callback_url;
  // Tool callbacks (docs/api.md, "Tool callbacks"): what the code may call,
  // and how long one call waits for its answer (0: the default,
  // min(kDefaultToolTimeoutMs, limits.timeout_ms)).
  std::vector<ToolDecl> tools;
  uint64_t tool_timeout_ms = 0;
  uint64_t ToolTimeoutMs() const;
  // Set on an excerpt (below): the digests and size of what was submitted.
  std::optional<SubmittedDigest> excerpt_of;

  // What is kept of a submission that was refused before it was admitted
  // (blocked by policy), so a flood of refused submits costs Redis and the
  // audit trail little: ids, language, isolation, session, limits, warnings and
  // callback_url (its end is still delivered); the
  // first kCodeExcerptBytes of the code (cut at a UTF-8 character boundary)
  // followed by a line saying how much was cut; no input, env, files or
  // collect (env may hold secrets); and excerpt_of, computed from this spec.
  // Called on an excerpt, returns it unchanged.
  JobSpec Excerpt() const;

  nlohmann::json ToJson() const;
  static common::StatusOr<JobSpec> FromJson(const nlohmann::json& j);
  common::protocol::Execute ToExecute() const;
};

// A session's epoch. `incarnation` names its interpreter to the worker (the
// worker protocol's session_epoch): unique across every session ever created
// or reset, so a session deleted and created again under the same id is a
// new one there too. `generation` is what records and the session list show:
// 1 for a new session, one more each time its interpreter is recreated.
// Redis keeps both as "<incarnation>/<generation>".
struct SessionEpoch {
  uint64_t incarnation = 0;
  uint64_t generation = 0;

  std::string ToString() const;
  // "<incarnation>/<generation>"; a bare number (written before generations
  // existed) is generation 1. nullopt for "" or anything else.
  static std::optional<SessionEpoch> Parse(std::string_view s);
  friend bool operator==(const SessionEpoch&, const SessionEpoch&) = default;
};

struct JobError {
  std::string code;  // API error code, e.g. "TIMEOUT"
  std::string message;
  bool retryable = false;
  std::string type;       // exception type, for failed jobs
  std::string traceback;  // for failed jobs
};

struct JobRecord {
  std::string id;
  JobStatus status = JobStatus::kQueued;
  std::string language;
  std::string isolation = std::string(kStandardIsolation);  // shown when not standard
  std::string session_id;
  std::string tenant;
  std::optional<int32_t> exit_code;
  std::optional<int32_t> signal;
  std::string stdout_data;
  std::string stderr_data;
  bool truncated = false;
  std::string result_json;  // empty: null
  std::optional<JobError> error;
  std::optional<double> duration_ms;
  std::optional<double> queued_ms;
  std::optional<double> cpu_ms;
  std::optional<uint64_t> max_rss_kb;
  std::string worker;
  std::vector<common::protocol::FileEntry> files;
  bool files_truncated = false;  // `collect` matched files that `files` does not hold
  uint32_t files_omitted = 0;    // how many of them the worker found and left out
  std::vector<common::protocol::RichOutput> outputs;  // figures, echoed values (bounded)
  bool outputs_truncated = false;                     // some outputs were left out
  std::optional<uint64_t> session_epoch;              // SessionEpoch::generation
  uint64_t session_incarnation = 0;                   // SessionEpoch::incarnation; not in the JSON
  std::optional<uint64_t> queue_position;
  std::string wait_reason;  // while queued: global, tenant, worker, runtime, session, fifo, ...
  uint32_t redactions = 0;
  // Jobs with network: what its worker's egress gateway counted (`network`
  // in the record only then).
  std::optional<common::NetworkUsage> network;
  std::vector<std::string> warnings;
  std::string end_reason;  // worker's reason ("exit", "timeout", ...), empty until the end
  int64_t created_ms = 0;
  int64_t started_ms = 0;
  int64_t finished_ms = 0;

  // The record of a job just admitted; every later one comes from
  // JobLifecycle (broker/job/lifecycle.hpp).
  static JobRecord Queued(const JobSpec& spec);

  nlohmann::json ToJson() const;
  static common::StatusOr<JobRecord> FromJson(const nlohmann::json& j);
  // About how long ToJson().dump() is, without making it: the output, result,
  // files and outputs (base64) plus a little; what UnreadBudget charges for it.
  size_t ApproxJsonBytes() const;
};

// The API's error object for a Status, e.g. {"code":"INVALID_REQUEST",...}.
nlohmann::json ErrorJson(const common::Status& status);

}  // namespace kiln::broker
