// MessagePack codec for the broker <-> worker messages; layout in
// docs/protocol.md. Each struct's fields are listed once, in a Describe()
// overload below, and that list drives the shared machinery: FieldCounter and
// MapWriter encode (field_counter.hpp, map_writer.hpp), ParseFrame and
// MapReader decode (frame_parser.hpp, map_reader.hpp). field_list.hpp
// describes the field kinds; docs/protocol.md mirrors these lists.

#include "common/protocol/codec.hpp"

#include <cstdint>
#include <utility>

#include "common/protocol/field_list.hpp"
#include "common/protocol/frame_parser.hpp"
#include "common/protocol/map_reader.hpp"
#include "common/protocol/map_writer.hpp"

namespace kiln::common::protocol {

// The field lists live in this namespace, the messages' own, where the shared
// visitors find them by argument-dependent lookup.

template <typename V>
void Describe(V& v, Ref<V, Limits> m) {
  v.Uint("timeout_ms", m.timeout_ms, Need::kRequired);
  v.Uint("memory_mb", m.memory_mb, Need::kRequired);
  v.Uint("cpu_ms", m.cpu_ms, Need::kRequired);
  v.Uint("max_output_bytes", m.max_output_bytes, Need::kRequired);
  v.Uint("max_pids", m.max_pids, Need::kRequired);
}

template <typename V>
void Describe(V& v, Ref<V, FileEntry> m) {
  v.Text("path", m.path, Need::kRequired, kMaxStringBytes);
  v.Bytes("content", m.content, Need::kRequired, kMaxFilesBytes);
}

template <typename V>
void Describe(V& v, Ref<V, RichOutput> m) {
  v.Text("mime", m.mime, Need::kRequired, kMaxMimeBytes);
  v.Bytes("data", m.data, Need::kRequired, kMaxRichOutputBytes);
}

template <typename V>
void Describe(V& v, Ref<V, ErrorInfo> m) {
  v.Text("type", m.type, Need::kOptional, kMaxStringBytes);
  v.Text("message", m.message, Need::kOptional, kMaxStringBytes);
  v.Text("traceback", m.traceback, Need::kOptional, kMaxStringBytes);
}

template <typename V>
void Describe(V& v, Ref<V, Register> m) {
  v.Id("worker_id", m.worker_id);
  v.Text("hostname", m.hostname, Need::kOptional, kMaxStringBytes);
  v.TextList("runtimes", m.runtimes, Need::kRequired);
  v.Uint("slots", m.slots, Need::kRequired);
  v.TextList("sandbox_layers", m.sandbox_layers, Need::kOptional);
  v.Text("metrics_endpoint", m.metrics_endpoint, Need::kOptional, kMaxStringBytes);
  v.Uint("heartbeat_interval_ms", m.heartbeat_interval_ms, Need::kOptional);
  v.Text("incarnation", m.incarnation, Need::kOptional, kMaxIdBytes);
  v.TextList("held_jobs", m.held_jobs, Need::kOptional, kMaxHeldJobs, kMaxIdBytes);
  v.Text("isolation", m.isolation, Need::kOptional, kMaxIdBytes);
  v.TextMap("runtime_versions", m.runtime_versions, Need::kOptional);
  v.TextList("packages", m.packages, Need::kOptional, kMaxPackages, kMaxPackageBytes);
}

template <typename V>
void Describe(V& v, Ref<V, RegisterAck> m) {
  v.Id("broker_id", m.broker_id);
  v.Uint("heartbeat_interval_ms", m.heartbeat_interval_ms, Need::kRequired);
  v.Uint("heartbeat_liveness", m.heartbeat_liveness, Need::kRequired);
}

template <typename V>
void Describe(V& v, Ref<V, Heartbeat> m) {
  v.Id("sender_id", m.sender_id);
  v.Uint("running", m.running, Need::kOptional);
  v.Uint("free_slots", m.free_slots, Need::kOptional);
  v.Bool("draining", m.draining, Need::kOptional);
}

template <typename V>
void Describe(V& v, Ref<V, Execute> m) {
  v.Id("job_id", m.job_id);
  v.Text("tenant", m.tenant, Need::kRequired, kMaxStringBytes);
  v.Text("language", m.language, Need::kRequired, kMaxStringBytes);
  v.Bytes("code", m.code, Need::kRequired, kMaxCodeBytes);
  v.Text("session_id", m.session_id, Need::kOptional, kMaxSessionKeyBytes);
  v.Uint("session_epoch", m.session_epoch, Need::kOptional);
  v.Uint("session_ttl_ms", m.session_ttl_ms, Need::kOptional);
  v.Text("input_json", m.input_json, Need::kOptional, kMaxInputJsonBytes);
  v.TextMap("env", m.env, Need::kOptional);
  v.Files("files", m.files, Need::kOptional);
  v.TextList("collect", m.collect, Need::kOptional);
  v.Struct("limits", m.limits, Need::kRequired);
  v.Bool("stream_output", m.stream_output, Need::kOptional);
  v.TextList("secrets", m.secrets, Need::kOptional);
  v.Text("isolation", m.isolation, Need::kOptional, kMaxIdBytes);
  v.Bytes("stdin_data", m.stdin_data, Need::kOptional, kMaxStdinBytes);
  v.TextList("packages", m.packages, Need::kOptional, kMaxRequestPackages, kMaxPackageBytes);
  v.TextList("network_allow", m.network_allow, Need::kOptional, kMaxNetworkDestinations,
             kMaxDestinationBytes);
  v.Uint("network_max_bytes", m.network_max_bytes, Need::kOptional);
  v.Uint("network_max_connections", m.network_max_connections, Need::kOptional);
  v.TextList("tools", m.tools, Need::kOptional, kMaxTools, kMaxToolNameBytes);
  v.Uint("tool_timeout_ms", m.tool_timeout_ms, Need::kOptional);
}

template <typename V>
void Describe(V& v, Ref<V, OutputChunk> m) {
  v.Id("job_id", m.job_id);
  v.Enum("stream", m.stream, Need::kRequired, Stream::kStdout, Stream::kStderr);
  v.Uint("seq", m.seq, Need::kRequired);
  v.Uint("offset", m.offset, Need::kOptional);
  v.Bytes("data", m.data, Need::kRequired, kMaxChunkBytes);
}

template <typename V>
void Describe(V& v, Ref<V, Result> m) {
  v.Id("job_id", m.job_id);
  v.Enum("reason", m.reason, Need::kRequired, EndReason::kExit, EndReason::kNetworkLimit);
  v.OptionalInt("exit_code", m.exit_code);
  v.OptionalInt("signal", m.signal);
  v.Bytes("stdout_data", m.stdout_data, Need::kOptional, kMaxStreamBytes);
  v.Bytes("stderr_data", m.stderr_data, Need::kOptional, kMaxStreamBytes);
  v.Bool("truncated", m.truncated, Need::kOptional);
  v.Text("result_json", m.result_json, Need::kOptional, kMaxResultJsonBytes);
  v.OptionalStruct("error", m.error);
  v.Double("duration_ms", m.duration_ms, Need::kOptional);
  v.Double("cpu_ms", m.cpu_ms, Need::kOptional);
  v.Uint("max_rss_kb", m.max_rss_kb, Need::kOptional);
  v.Files("files", m.files, Need::kOptional);
  v.Bool("files_truncated", m.files_truncated, Need::kOptional);
  v.Uint("files_omitted", m.files_omitted, Need::kOptional);
  v.Outputs("outputs", m.outputs, Need::kOptional);
  v.Bool("outputs_truncated", m.outputs_truncated, Need::kOptional);
  v.Uint("redactions", m.redactions, Need::kOptional);
  v.Uint("session_epoch", m.session_epoch, Need::kOptional);
  v.Bool("session_reset", m.session_reset, Need::kOptional);
  v.Text("worker_error", m.worker_error, Need::kOptional, kMaxStringBytes);
  v.Text("worker_error_code", m.worker_error_code, Need::kOptional, kMaxIdBytes);
  v.Text("network_json", m.network_json, Need::kOptional, kMaxNetworkUsageBytes);
}

template <typename V>
void Describe(V& v, Ref<V, Cancel> m) {
  v.Id("job_id", m.job_id);
}

template <typename V>
void Describe(V& v, Ref<V, CloseSession> m) {
  v.Text("session_id", m.session_id, Need::kRequired, kMaxSessionKeyBytes);
}

template <typename V>
void Describe(V& v, Ref<V, ResultAck> m) {
  v.Id("job_id", m.job_id);
}

template <typename V>
void Describe(V& v, Ref<V, ToolCall> m) {
  v.Id("job_id", m.job_id);
  v.Uint("call", m.call, Need::kRequired);
  v.Text("name", m.name, Need::kRequired, kMaxToolNameBytes);
  v.Text("arguments_json", m.arguments_json, Need::kRequired, kMaxToolArgumentBytes);
}

template <typename V>
void Describe(V& v, Ref<V, ToolResult> m) {
  v.Id("job_id", m.job_id);
  v.Uint("call", m.call, Need::kRequired);
  v.Bool("ok", m.ok, Need::kOptional);
  v.Text("result_json", m.result_json, Need::kOptional, kMaxToolResultBytes);
  v.Text("error_type", m.error_type, Need::kOptional, kMaxIdBytes);
  v.Text("error_message", m.error_message, Need::kOptional, kMaxToolErrorBytes);
}

template <typename V>
void Describe(V& v, Ref<V, Disconnect> m) {
  v.Text("reason", m.reason, Need::kOptional, kMaxStringBytes);
}

namespace {

// The body of a message of type T, as a Message.
template <typename T>
StatusOr<Message> BodyAs(const msgpack::object& body, MessageType type) {
  StatusOr<T> message = DecodeBody<T>(body, TypeName(type));
  if (!message.ok()) return message.status();
  return Message{std::move(message).value()};
}

StatusOr<Message> DecodeFrame(const msgpack::object& frame) {
  RETURN_IF_ERROR(CheckEnvelope(frame, kProtocolVersion, "protocol"));
  const msgpack::object_array& a = frame.via.array;
  const msgpack::object& type = a.ptr[1];
  const msgpack::object& body = a.ptr[2];
  switch (type.via.u64) {
    case static_cast<uint64_t>(MessageType::kRegister):
      return BodyAs<Register>(body, MessageType::kRegister);
    case static_cast<uint64_t>(MessageType::kRegisterAck):
      return BodyAs<RegisterAck>(body, MessageType::kRegisterAck);
    case static_cast<uint64_t>(MessageType::kHeartbeat):
      return BodyAs<Heartbeat>(body, MessageType::kHeartbeat);
    case static_cast<uint64_t>(MessageType::kExecute):
      return BodyAs<Execute>(body, MessageType::kExecute);
    case static_cast<uint64_t>(MessageType::kOutputChunk):
      return BodyAs<OutputChunk>(body, MessageType::kOutputChunk);
    case static_cast<uint64_t>(MessageType::kResult):
      return BodyAs<Result>(body, MessageType::kResult);
    case static_cast<uint64_t>(MessageType::kCancel):
      return BodyAs<Cancel>(body, MessageType::kCancel);
    case static_cast<uint64_t>(MessageType::kDisconnect):
      return BodyAs<Disconnect>(body, MessageType::kDisconnect);
    case static_cast<uint64_t>(MessageType::kCloseSession):
      return BodyAs<CloseSession>(body, MessageType::kCloseSession);
    case static_cast<uint64_t>(MessageType::kResultAck):
      return BodyAs<ResultAck>(body, MessageType::kResultAck);
    case static_cast<uint64_t>(MessageType::kToolCall):
      return BodyAs<ToolCall>(body, MessageType::kToolCall);
    case static_cast<uint64_t>(MessageType::kToolResult):
      return BodyAs<ToolResult>(body, MessageType::kToolResult);
    default:
      return InvalidRequest("unknown message type " + std::to_string(type.via.u64));
  }
}

}  // namespace

std::string Encode(const Message& message) {
  const auto type = static_cast<uint8_t>(TypeOf(message));
  return std::visit([type](const auto& body) { return EncodeFrame(kProtocolVersion, type, body); },
                    message);
}

StatusOr<Message> Decode(std::string_view bytes) {
  return ParseMessage<Message>(bytes, DecodeFrame);
}

}  // namespace kiln::common::protocol
