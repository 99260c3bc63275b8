// MessagePack codec for the native client protocol: the client messages'
// field lists, over the machinery the worker codec uses too (field_list.hpp,
// map_writer.hpp, frame_parser.hpp, map_reader.hpp). The bodies are flat
// maps of str/bin, uint and bool values.

#include "common/protocol/client_codec.hpp"

#include <cstdint>
#include <utility>

#include "common/protocol/field_list.hpp"
#include "common/protocol/frame_parser.hpp"
#include "common/protocol/map_reader.hpp"
#include "common/protocol/map_writer.hpp"

namespace kiln::common::protocol::client {

// The field lists live in this namespace, the messages' own, where the shared
// visitors find them by argument-dependent lookup.

template <typename V>
void Describe(V& v, Ref<V, Submit> m) {
  v.Uint("request_id", m.request_id, Need::kRequired);
  v.Text("token", m.token, Need::kRequired, kMaxTokenBytes);
  v.Text("request_json", m.request_json, Need::kRequired, kMaxRequestJsonBytes);
  v.Text("idempotency_key", m.idempotency_key, Need::kOptional, kMaxIdempotencyKeyBytes);
  v.Bool("subscribe", m.subscribe, Need::kOptional);
}

template <typename V>
void Describe(V& v, Ref<V, Subscribe> m) {
  v.Uint("request_id", m.request_id, Need::kRequired);
  v.Text("token", m.token, Need::kRequired, kMaxTokenBytes);
  v.Id("id", m.id);
  v.Uint("from_seq", m.from_seq, Need::kOptional);
}

template <typename V>
void Describe(V& v, Ref<V, Cancel> m) {
  v.Uint("request_id", m.request_id, Need::kRequired);
  v.Text("token", m.token, Need::kRequired, kMaxTokenBytes);
  v.Id("id", m.id);
}

template <typename V>
void Describe(V& v, Ref<V, Get> m) {
  v.Uint("request_id", m.request_id, Need::kRequired);
  v.Text("token", m.token, Need::kRequired, kMaxTokenBytes);
  v.Id("id", m.id);
}

template <typename V>
void Describe(V& v, Ref<V, Accepted> m) {
  v.Uint("request_id", m.request_id, Need::kRequired);
  v.Id("id", m.id);
  v.Text("status", m.status, Need::kRequired, kMaxStringBytes);
}

template <typename V>
void Describe(V& v, Ref<V, Output> m) {
  v.Uint("request_id", m.request_id, Need::kRequired);
  v.Id("id", m.id);
  v.Enum("stream", m.stream, Need::kRequired, Stream::kStdout, Stream::kStderr);
  v.Uint("seq", m.seq, Need::kRequired);
  v.Bytes("data", m.data, Need::kRequired, kMaxChunkBytes);
}

template <typename V>
void Describe(V& v, Ref<V, Result> m) {
  v.Uint("request_id", m.request_id, Need::kRequired);
  v.Id("id", m.id);
  v.Text("record_json", m.record_json, Need::kRequired, kMaxRecordJsonBytes);
}

template <typename V>
void Describe(V& v, Ref<V, Error> m) {
  v.Uint("request_id", m.request_id, Need::kRequired);
  v.Text("code", m.code, Need::kRequired, kMaxStringBytes);
  v.Text("message", m.message, Need::kOptional, kMaxStringBytes);
  v.Bool("retryable", m.retryable, Need::kOptional);
  v.Text("id", m.id, Need::kOptional, kMaxIdBytes);
}

template <typename V>
void Describe(V& v, Ref<V, ToolAnswer> m) {
  v.Uint("request_id", m.request_id, Need::kRequired);
  v.Text("token", m.token, Need::kRequired, kMaxTokenBytes);
  v.Id("id", m.id);
  v.Text("call_id", m.call_id, Need::kRequired, kMaxIdBytes);
  v.Text("result_json", m.result_json, Need::kOptional, kMaxToolResultBytes);
  v.Bool("is_error", m.is_error, Need::kOptional);
  v.Text("error", m.error, Need::kOptional, kMaxToolErrorBytes);
}

template <typename V>
void Describe(V& v, Ref<V, ToolCall> m) {
  v.Uint("request_id", m.request_id, Need::kRequired);
  v.Id("id", m.id);
  v.Text("call_id", m.call_id, Need::kRequired, kMaxIdBytes);
  v.Text("name", m.name, Need::kRequired, kMaxToolNameBytes);
  v.Text("arguments_json", m.arguments_json, Need::kRequired, kMaxToolArgumentBytes);
}

template <typename V>
void Describe(V& v, Ref<V, ToolAnswered> m) {
  v.Uint("request_id", m.request_id, Need::kRequired);
  v.Id("id", m.id);
  v.Text("call_id", m.call_id, Need::kRequired, kMaxIdBytes);
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
  RETURN_IF_ERROR(CheckEnvelope(frame, kClientProtocolVersion, "client protocol"));
  const msgpack::object& body = frame.via.array.ptr[2];
  switch (const uint64_t type = frame.via.array.ptr[1].via.u64) {
    case static_cast<uint64_t>(MessageType::kSubmit):
      return BodyAs<Submit>(body, MessageType::kSubmit);
    case static_cast<uint64_t>(MessageType::kSubscribe):
      return BodyAs<Subscribe>(body, MessageType::kSubscribe);
    case static_cast<uint64_t>(MessageType::kCancel):
      return BodyAs<Cancel>(body, MessageType::kCancel);
    case static_cast<uint64_t>(MessageType::kGet):
      return BodyAs<Get>(body, MessageType::kGet);
    case static_cast<uint64_t>(MessageType::kAccepted):
      return BodyAs<Accepted>(body, MessageType::kAccepted);
    case static_cast<uint64_t>(MessageType::kOutput):
      return BodyAs<Output>(body, MessageType::kOutput);
    case static_cast<uint64_t>(MessageType::kResult):
      return BodyAs<Result>(body, MessageType::kResult);
    case static_cast<uint64_t>(MessageType::kError):
      return BodyAs<Error>(body, MessageType::kError);
    case static_cast<uint64_t>(MessageType::kToolAnswer):
      return BodyAs<ToolAnswer>(body, MessageType::kToolAnswer);
    case static_cast<uint64_t>(MessageType::kToolCall):
      return BodyAs<ToolCall>(body, MessageType::kToolCall);
    case static_cast<uint64_t>(MessageType::kToolAnswered):
      return BodyAs<ToolAnswered>(body, MessageType::kToolAnswered);
    default:
      return InvalidRequest("unknown message type " + std::to_string(type));
  }
}

}  // namespace

std::string Encode(const Message& message) {
  const auto type = static_cast<uint8_t>(TypeOf(message));
  return std::visit(
      [type](const auto& body) { return EncodeFrame(kClientProtocolVersion, type, body); },
      message);
}

StatusOr<Message> Decode(std::string_view bytes) {
  return ParseMessage<Message>(bytes, DecodeFrame);
}

uint64_t PeekRequestId(std::string_view bytes) {
  uint64_t id = 0;
  (void)ParseFrame(bytes, [&id](const msgpack::object& root) {
    if (!CheckEnvelope(root, kClientProtocolVersion, "client protocol").ok()) return Status::Ok();
    const msgpack::object& body = root.via.array.ptr[2];
    if (body.type != msgpack::type::MAP) return Status::Ok();
    for (uint32_t i = 0; i < body.via.map.size; ++i) {
      const msgpack::object_kv& kv = body.via.map.ptr[i];
      if (IsText(kv.key) && View(kv.key) == "request_id" &&
          kv.val.type == msgpack::type::POSITIVE_INTEGER) {
        id = kv.val.via.u64;
      }
    }
    return Status::Ok();
  });
  return id;
}

}  // namespace kiln::common::protocol::client
