// The native client protocol (client <-> broker, version 1), as plain structs.
//
//   std::string bytes = client::Encode(client::Get{.request_id = 7, .token = t, .id = "ex_1"});
//   StatusOr<client::Message> m = client::Decode(bytes);  // never throws
//
// A client's DEALER talks to the broker's client ROUTER (broker.clients.endpoint).
// Every message is one ZeroMQ frame holding one MessagePack array
// [version, type, body-map], like the broker <-> worker protocol, but with
// its own message set; docs/protocol.md ("Client protocol") gives the layout.
// Each request carries a client-chosen `request_id`, echoed by every reply
// it causes, so many requests may be in flight on one socket.
// Plain data: any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include "common/protocol/messages.hpp"

namespace kiln::common::protocol::client {

inline constexpr uint32_t kClientProtocolVersion = 1;

// Decoder limits (the broker applies its configured, smaller ones on top).
inline constexpr size_t kMaxTokenBytes = kMaxStringBytes;
inline constexpr size_t kMaxRequestJsonBytes = kMaxFilesBytes;  // 32 MiB: one str
inline constexpr size_t kMaxRecordJsonBytes = kMaxFilesBytes;
inline constexpr size_t kMaxIdempotencyKeyBytes = 128;

enum class MessageType : uint8_t {
  // client -> broker
  kSubmit = 1,
  kSubscribe = 2,
  kCancel = 3,
  kGet = 4,
  kToolAnswer = 5,
  // broker -> client
  kAccepted = 11,
  kOutput = 12,
  kResult = 13,
  kError = 14,
  kToolCall = 15,
  kToolAnswered = 16,
};

// Submits one execution. `request_json` is the JSON body POST /v1/executions
// takes (docs/api.md); its `wait` field is ignored (answers never wait).
// Answered by Accepted (or Error); with `subscribe`, Output events and one
// Result for the job follow under the same request_id.
struct Submit {
  uint64_t request_id = 0;
  std::string token;
  std::string request_json;
  std::string idempotency_key;  // optional: as the Idempotency-Key header
  bool subscribe = false;
  friend bool operator==(const Submit&, const Submit&) = default;
};

// Streams a job's output: the chunks stored so far, then live ones, then
// exactly one Result once the job has ended.
struct Subscribe {
  uint64_t request_id = 0;
  std::string token;
  std::string id;
  // Resuming after a reconnect: only chunks with seq >= from_seq are sent
  // (the last seen seq + 1). 0: every chunk.
  uint64_t from_seq = 0;
  friend bool operator==(const Subscribe&, const Subscribe&) = default;
};

// Cancels a job: answered by Result when it has ended (or was already
// over), else by Accepted with its current status (the end follows for a
// subscriber).
struct Cancel {
  uint64_t request_id = 0;
  std::string token;
  std::string id;
  friend bool operator==(const Cancel&, const Cancel&) = default;
};

// Reads a job's record (in any state): answered by Result.
struct Get {
  uint64_t request_id = 0;
  std::string token;
  std::string id;
  friend bool operator==(const Get&, const Get&) = default;
};

struct Accepted {
  uint64_t request_id = 0;
  std::string id;
  std::string status;  // "queued", "awaiting_approval", "running", ...
  friend bool operator==(const Accepted&, const Accepted&) = default;
};

// One output chunk of a subscribed job, in `seq` order.
struct Output {
  uint64_t request_id = 0;
  std::string id;
  Stream stream = Stream::kStdout;
  uint64_t seq = 0;
  std::string data;
  friend bool operator==(const Output&, const Output&) = default;
};

// A job's record, as the JSON text of GET /v1/executions/{id}.
struct Result {
  uint64_t request_id = 0;
  std::string id;
  std::string record_json;
  friend bool operator==(const Result&, const Result&) = default;
};

// A refused or failed request. request_id is 0 when the frame could not be
// decoded far enough to read it.
struct Error {
  uint64_t request_id = 0;
  std::string code;  // the API's error code, e.g. "UNAUTHORIZED"
  std::string message;
  bool retryable = false;
  std::string id;  // the job concerned, when there is one (e.g. SECURITY_BLOCKED)
  friend bool operator==(const Error&, const Error&) = default;
};

// Answers a running job's tool call (docs/api.md, "Tool callbacks"), as
// POST /v1/executions/{id}/tool-results does: `result_json` (the JSON text of
// any value) or, with is_error, `error`. Answered by ToolAnswered (or Error).
struct ToolAnswer {
  uint64_t request_id = 0;
  std::string token;
  std::string id;
  std::string call_id;
  std::string result_json;
  bool is_error = false;
  std::string error;
  friend bool operator==(const ToolAnswer&, const ToolAnswer&) = default;
};

// A subscribed job's code called one of its tools: answer it with
// ToolAnswer (on any connection, any broker). Between the job's Output
// events, in the order the broker stored them.
struct ToolCall {
  uint64_t request_id = 0;
  std::string id;
  std::string call_id;
  std::string name;
  std::string arguments_json;  // a JSON object
  friend bool operator==(const ToolCall&, const ToolCall&) = default;
};

// A ToolAnswer was taken: on its way into the sandbox.
struct ToolAnswered {
  uint64_t request_id = 0;
  std::string id;
  std::string call_id;
  friend bool operator==(const ToolAnswered&, const ToolAnswered&) = default;
};

using Message = std::variant<Submit, Subscribe, Cancel, Get, Accepted, Output, Result, Error,
                             ToolAnswer, ToolCall, ToolAnswered>;

MessageType TypeOf(const Message& m);
const char* TypeName(MessageType t);
// The request_id of any message.
uint64_t RequestIdOf(const Message& m);

}  // namespace kiln::common::protocol::client
