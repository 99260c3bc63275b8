// The broker <-> worker wire messages (protocol version 2), as plain structs.
//
//   std::string bytes = protocol::Encode(protocol::Heartbeat{.sender_id = "w1"});
//   StatusOr<protocol::Message> m = protocol::Decode(bytes);  // never throws
//
// Every message travels as one ZeroMQ frame holding one MessagePack array
// [version, type, body-map]; docs/protocol.md gives the layout of each body.
// The codec (codec.hpp) enforces the hard limits below. Plain data: any thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace kiln::common::protocol {

// 2: result_ack (and register.incarnation, held_jobs, output_chunk.offset;
// later, compatibly: execute.stdin_data, packages and network_*, result.outputs,
// outputs_truncated and network_json, end reason network_limit).
inline constexpr uint32_t kProtocolVersion = 2;

// Hard limits, enforced by Decode (and by Encode's callers through config
// maxima that are always below them).
inline constexpr size_t kMaxMessageBytes = 64u << 20;  // one frame
inline constexpr size_t kMaxIdBytes = 128;             // job and worker ids
// A session's key: '<tenant>/<id>' (tenant names up to 64 bytes, ids up to 128).
inline constexpr size_t kMaxSessionKeyBytes = 256;
inline constexpr size_t kMaxCodeBytes = 4u << 20;
inline constexpr size_t kMaxInputJsonBytes = 8u << 20;
inline constexpr size_t kMaxFiles = 256;
inline constexpr size_t kMaxFilesBytes = 32u << 20;  // sum of file contents
inline constexpr size_t kMaxEnvEntries = 256;
inline constexpr size_t kMaxStringBytes = 64u << 10;  // names, paths, env values
inline constexpr size_t kMaxChunkBytes = 64u << 10;   // one OutputChunk's data
inline constexpr size_t kMaxStreamBytes = 16u << 20;  // stdout or stderr in a Result
inline constexpr size_t kMaxResultJsonBytes = 8u << 20;
inline constexpr size_t kMaxListEntries = 64;  // runtimes, layers, collect
inline constexpr size_t kMaxHeldJobs = 1000;   // job ids in a Register
inline constexpr size_t kMaxPackages = 1000;   // Register.packages entries (<= 1024, the decoder's)
inline constexpr size_t kMaxPackageBytes = 256;
// Packages one job may ask for (Execute.packages).
inline constexpr size_t kMaxRequestPackages = 32;
// The longest a worker may spend installing a job's packages before its
// timeout starts (its `packages.install.timeout_ms` is capped here); the
// broker allows jobs with packages this much longer.
inline constexpr uint64_t kMaxPackageInstallMs = 300'000;
// Network on request (common/network_policy.hpp): destinations one job or
// tenant may list (Execute.network_allow), each at most this long ("*." and
// a 253-byte name, ':' and a port); the JSON of a Result's network usage.
inline constexpr size_t kMaxNetworkDestinations = 64;
inline constexpr size_t kMaxDestinationBytes = 264;
inline constexpr size_t kMaxNetworkUsageBytes = 32u << 10;
// What a job reads on its standard input (Execute.stdin_data).
inline constexpr size_t kMaxStdinBytes = 1u << 20;
// Rich outputs of one execution (Result.outputs): at most this many, with at
// most this many bytes of data in all, and mime types of at most this length
// (common/rich_output.hpp gives the rules both ends apply).
inline constexpr size_t kMaxRichOutputs = 16;
inline constexpr size_t kMaxRichOutputBytes = 4u << 20;
inline constexpr size_t kMaxMimeBytes = 127;
// Tool callbacks (docs/api.md, "Tool callbacks"): declared tool names per
// job, a call's arguments and an answer's result (compact JSON), an error's
// text, the longest wait for an answer; calls per execution, and calls
// waiting for their answers at once (the worker enforces both, the broker
// the first again).
inline constexpr size_t kMaxTools = 32;
inline constexpr size_t kMaxToolCalls = 256;
inline constexpr size_t kMaxToolCallsWaiting = 8;
inline constexpr size_t kMaxToolNameBytes = 64;
inline constexpr size_t kMaxToolArgumentBytes = 64u << 10;
inline constexpr size_t kMaxToolResultBytes = 1u << 20;
inline constexpr size_t kMaxToolErrorBytes = 4096;
inline constexpr uint64_t kMaxToolTimeoutMs = 300'000;

enum class MessageType : uint8_t {
  kRegister = 1,
  kRegisterAck = 2,
  kHeartbeat = 3,
  kExecute = 4,
  kOutputChunk = 5,
  kResult = 6,
  kCancel = 7,
  kDisconnect = 8,
  kCloseSession = 9,
  kResultAck = 10,
  kToolCall = 11,
  kToolResult = 12,
};

struct Limits {
  uint64_t timeout_ms = 0;
  uint64_t memory_mb = 0;
  uint64_t cpu_ms = 0;
  uint64_t max_output_bytes = 0;
  uint64_t max_pids = 0;
  friend bool operator==(const Limits&, const Limits&) = default;
};

struct FileEntry {
  std::string path;     // relative to the workspace
  std::string content;  // raw bytes
  friend bool operator==(const FileEntry&, const FileEntry&) = default;
};

// worker -> broker, first message on a connection and again after the broker
// is seen to restart. The broker answers with RegisterAck.
struct Register {
  std::string worker_id;
  std::string hostname;
  std::vector<std::string> runtimes;        // "python", "javascript", "shell"
  uint32_t slots = 0;                       // concurrent one-shot jobs
  std::vector<std::string> sandbox_layers;  // active layers, e.g. "seccomp"
  std::string metrics_endpoint;             // host:port of the worker's /metrics
  uint32_t heartbeat_interval_ms = 0;
  // Random per worker process: a broker that sees the same incarnation again
  // knows the worker reconnected (its jobs and sessions live on), not restarted.
  std::string incarnation;
  // Jobs the worker still holds: running, or finished with a Result no broker
  // has acknowledged yet. A broker loses only the jobs missing here.
  std::vector<std::string> held_jobs;
  // The isolation level every sandbox of this worker has: "standard" (empty
  // means standard, as sent by older workers) or "gvisor". A worker offers
  // exactly one; the broker sends it only jobs of that level.
  std::string isolation;
  // What the sandboxes offer (GET /v1/runtimes): the interpreter's version
  // per runtime, and installed packages as "<runtime> <name> <version>".
  std::map<std::string, std::string> runtime_versions;
  std::vector<std::string> packages;
  friend bool operator==(const Register&, const Register&) = default;
};

// broker -> worker.
struct RegisterAck {
  std::string broker_id;
  uint32_t heartbeat_interval_ms = 0;
  uint32_t heartbeat_liveness = 0;  // missed beats before the peer is dead
  friend bool operator==(const RegisterAck&, const RegisterAck&) = default;
};

// Both directions, every heartbeat interval while nothing else is sent.
struct Heartbeat {
  std::string sender_id;
  uint32_t running = 0;     // jobs running on the worker (0 from a broker)
  uint32_t free_slots = 0;  // worker only
  bool draining = false;    // worker only: takes no new jobs
  friend bool operator==(const Heartbeat&, const Heartbeat&) = default;
};

// broker -> worker: run one job.
struct Execute {
  std::string job_id;
  std::string tenant;
  std::string language;
  std::string code;
  std::string session_id;  // empty for one-shot jobs
  // The session's incarnation: a worker holding the session's sandbox under
  // another epoch (or none) starts a fresh interpreter for this one.
  uint64_t session_epoch = 0;
  uint64_t session_ttl_ms = 0;  // the worker destroys the session's sandbox when idle this long
  std::string input_json;       // a JSON object, or empty for none
  std::map<std::string, std::string> env;
  std::vector<FileEntry> files;
  std::vector<std::string> collect;  // glob patterns relative to the workspace
  Limits limits;
  bool stream_output = false;  // send OutputChunk messages as output is produced
  // The tenant's registered secrets: the worker masks them in everything the
  // job returns. Never stored in Redis.
  std::vector<std::string> secrets;
  // The level the job must run at ("standard" when empty): a worker of any
  // other level refuses the job rather than run it weaker or elsewhere.
  std::string isolation;
  // What the program reads on its standard input (fd 0), <= kMaxStdinBytes;
  // empty: stdin is at EOF.
  std::string stdin_data;
  // Extra packages the job asked for (common/package_spec.hpp: at most
  // kMaxRequestPackages specs, each "name" or "name==version" for python,
  // "name" or "name@version" for javascript); the worker installs them from
  // its configured index and mounts them read-only at /packages.
  std::vector<std::string> packages;
  // Network on request: the destinations the job may reach through its
  // worker's egress gateway (common/network_policy.hpp: host:port entries,
  // already within its tenant's allowlist); empty: no network at all. The
  // caps are the job's (per session execution): bytes both ways, and
  // connections asked for (0: none allowed).
  std::vector<std::string> network_allow;
  uint64_t network_max_bytes = 0;
  uint64_t network_max_connections = 0;
  // Tool callbacks: the names of the tools the job declared (the broker
  // keeps their schemas and checks every call) and how long one call waits
  // for its answer. Empty: every call is refused.
  std::vector<std::string> tools;
  uint64_t tool_timeout_ms = 0;
  friend bool operator==(const Execute&, const Execute&) = default;
};

enum class Stream : uint8_t { kStdout = 1, kStderr = 2 };

// worker -> broker: a piece of output, already passed through the secrets filter.
struct OutputChunk {
  std::string job_id;
  Stream stream = Stream::kStdout;
  uint64_t seq = 0;     // per job, from 0, across both streams
  uint64_t offset = 0;  // where `data` starts in its stream (bytes kept before it)
  std::string data;
  friend bool operator==(const OutputChunk&, const OutputChunk&) = default;
};

// Why an execution ended.
enum class EndReason : uint8_t {
  kExit = 1,     // the program exited (or was killed by a signal it caused)
  kTimeout = 2,  // wall-clock or cpu limit
  kMemoryExceeded = 3,
  kOutputLimit = 4,  // reserved: output over the cap is truncated, not fatal
  kCancelled = 5,
  kSandboxViolation = 6,  // killed by the seccomp filter
  kError = 7,             // the worker could not run it (see worker_error)
  kRefused = 8,           // the worker did not start it (busy, draining): run it elsewhere
  kNetworkLimit = 9,      // over a network cap (bytes, connections); worker_error says which
};

struct ErrorInfo {
  std::string type;
  std::string message;
  std::string traceback;
  friend bool operator==(const ErrorInfo&, const ErrorInfo&) = default;
};

// One rich output of an execution (a matplotlib figure, a notebook-style
// echo of the last expression): a mime type ("image/png", "text/plain") and
// its raw bytes (UTF-8 text for text/* types).
struct RichOutput {
  std::string mime;
  std::string data;
  friend bool operator==(const RichOutput&, const RichOutput&) = default;
};

// worker -> broker: the end of one job.
struct Result {
  std::string job_id;
  EndReason reason = EndReason::kExit;
  std::optional<int32_t> exit_code;
  std::optional<int32_t> signal;
  std::string stdout_data;
  std::string stderr_data;
  bool truncated = false;
  std::string result_json;  // JSON text of `result`, empty when unset
  std::optional<ErrorInfo> error;
  double duration_ms = 0;
  double cpu_ms = 0;
  uint64_t max_rss_kb = 0;
  std::vector<FileEntry> files;  // collected output files
  // `collect` matched more than `files` holds: files over the worker's byte
  // budget or past kMaxFiles were left out (files_omitted counts them), or
  // the workspace was too large to search completely.
  bool files_truncated = false;
  uint32_t files_omitted = 0;
  // Rich outputs, in the order they were produced (kMaxRichOutputs,
  // kMaxRichOutputBytes); outputs_truncated: some were left out.
  std::vector<RichOutput> outputs;
  bool outputs_truncated = false;
  uint32_t redactions = 0;
  uint64_t session_epoch = 0;
  // The session's interpreter did not keep its state: this execution ran in
  // a fresh one although the session had run before, or it was destroyed
  // after this execution (hung, crashed, killed). The broker gives the
  // session a new epoch.
  bool session_reset = false;
  // Set with kError: why the worker could not run it. With
  // kSandboxViolation: the system call the sandbox was killed for.
  std::string worker_error;
  // Set with kError: the failure's API code name (e.g. "INVALID_REQUEST").
  // The broker passes on only the codes that blame the job's own input.
  std::string worker_error_code;
  // Jobs with network: common::NetworkUsage as JSON (<= kMaxNetworkUsageBytes).
  std::string network_json;
  friend bool operator==(const Result&, const Result&) = default;
};

// broker -> worker.
struct Cancel {
  std::string job_id;
  friend bool operator==(const Cancel&, const Cancel&) = default;
};

// broker -> worker: the session was deleted; destroy its sandbox.
struct CloseSession {
  std::string session_id;
  friend bool operator==(const CloseSession&, const CloseSession&) = default;
};

// Either direction, before closing: the peer forgets the sender at once.
struct Disconnect {
  std::string reason;
  friend bool operator==(const Disconnect&, const Disconnect&) = default;
};

// Broker -> worker: the job's Result is stored (or was not needed): the
// worker may forget it. Until then the worker keeps it and sends it again
// after every (re)registration.
struct ResultAck {
  std::string job_id;
  friend bool operator==(const ResultAck&, const ResultAck&) = default;
};

// worker -> broker: the job's code called a tool. `call` numbers the job's
// calls on this worker, from 1; the broker names the call to clients and
// answers with the same number. Arguments: a JSON object, already through the
// secrets filter, <= kMaxToolArgumentBytes.
struct ToolCall {
  std::string job_id;
  uint64_t call = 0;
  std::string name;
  std::string arguments_json;
  friend bool operator==(const ToolCall&, const ToolCall&) = default;
};

// broker -> worker: the answer to a ToolCall, or why there is none.
struct ToolResult {
  std::string job_id;
  uint64_t call = 0;
  bool ok = false;
  std::string result_json;    // ok: any JSON value, <= kMaxToolResultBytes
  std::string error_type;     // !ok: "ToolError" (the client's), "ToolRefused", "ToolUnavailable"
  std::string error_message;  // !ok, <= kMaxToolErrorBytes
  friend bool operator==(const ToolResult&, const ToolResult&) = default;
};

using Message = std::variant<Register, RegisterAck, Heartbeat, Execute, OutputChunk, Result, Cancel,
                             Disconnect, CloseSession, ResultAck, ToolCall, ToolResult>;

MessageType TypeOf(const Message& m);
const char* TypeName(MessageType t);
const char* EndReasonName(EndReason r);  // "exit", "timeout", ...

}  // namespace kiln::common::protocol
