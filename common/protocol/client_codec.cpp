// MessagePack codec for the native client protocol. The bodies are flat maps
// of str/bin, uint and bool values, so one small Describe() list per message
// drives a counter, an encoder and a decoder (the worker codec's pattern,
// codec.cpp, without its nested structs). Frame-level checks come from
// ParseFrame (frame_parser.hpp), shared with the worker codec.

#include "common/protocol/client_codec.hpp"

#include <limits>
#include <msgpack.hpp>
#include <type_traits>
#include <utility>

#include "common/protocol/frame_parser.hpp"

namespace kiln::common::protocol::client {
namespace {

enum class Need { kRequired, kOptional };

template <typename V, typename T>
using Ref = std::conditional_t<V::kDecodes, T&, const T&>;

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
  v.Stream("stream", m.stream);
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

// ---------------------------------------------------------------------------
// Encoding

class FieldCounter {
 public:
  static constexpr bool kDecodes = false;
  size_t fields = 0;
  size_t bytes = 0;

  void Id(std::string_view k, const std::string& v) { Add(k, v.size()); }
  void Text(std::string_view k, const std::string& v, Need, size_t) { Add(k, v.size()); }
  void Bytes(std::string_view k, const std::string& v, Need, size_t) { Add(k, v.size()); }
  void Uint(std::string_view k, const uint64_t&, Need) { Add(k, 0); }
  void Bool(std::string_view k, const bool&, Need) { Add(k, 0); }
  void Stream(std::string_view k, const protocol::Stream&) { Add(k, 0); }

 private:
  void Add(std::string_view key, size_t n) {
    ++fields;
    bytes += key.size() + n + 18;
  }
};

class StringSink {
 public:
  explicit StringSink(std::string* out) : out_(out) {}
  void write(const char* data, size_t size) { out_->append(data, size); }

 private:
  std::string* out_;
};

using Packer = msgpack::packer<StringSink>;

class BodyEncoder {
 public:
  static constexpr bool kDecodes = false;
  explicit BodyEncoder(Packer& pk) : pk_(pk) {}

  void Id(std::string_view k, const std::string& v) { Text(k, v, Need::kRequired, 0); }
  void Text(std::string_view k, const std::string& v, Need, size_t) {
    Str(k);
    Str(v);
  }
  void Bytes(std::string_view k, const std::string& v, Need, size_t) {
    Str(k);
    pk_.pack_bin(static_cast<uint32_t>(v.size()));
    pk_.pack_bin_body(v.data(), static_cast<uint32_t>(v.size()));
  }
  void Uint(std::string_view k, const uint64_t& v, Need) {
    Str(k);
    pk_.pack_uint64(v);
  }
  void Bool(std::string_view k, const bool& v, Need) {
    Str(k);
    if (v) {
      pk_.pack_true();
    } else {
      pk_.pack_false();
    }
  }
  void Stream(std::string_view k, const protocol::Stream& v) {
    Str(k);
    pk_.pack_uint64(static_cast<uint64_t>(v));
  }

 private:
  void Str(std::string_view s) {
    pk_.pack_str(static_cast<uint32_t>(s.size()));
    pk_.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
  }
  Packer& pk_;
};

// ---------------------------------------------------------------------------
// Decoding

// Reads the fields Describe() lists out of one flat map; the first error wins.
class BodyDecoder {
 public:
  static constexpr bool kDecodes = true;
  BodyDecoder(const msgpack::object_map& map, std::string_view name) : map_(map), name_(name) {}
  const Status& status() const { return status_; }

  void Id(std::string_view k, std::string& v) {
    Text(k, v, Need::kRequired, kMaxIdBytes);
    if (status_.ok() && v.empty()) Fail(k, InvalidRequest("must not be empty"));
  }
  void Text(std::string_view k, std::string& v, Need need, size_t max_bytes) {
    const msgpack::object* o = Find(k, need);
    if (o == nullptr) return;
    if (!IsText(*o)) return Fail(k, WrongType("str or bin", *o));
    std::string_view s = View(*o);
    if (s.size() > max_bytes) {
      return Fail(k, InvalidRequest(std::to_string(s.size()) + " bytes exceeds the limit of " +
                                    std::to_string(max_bytes)));
    }
    v.assign(s);
  }
  void Bytes(std::string_view k, std::string& v, Need need, size_t max_bytes) {
    Text(k, v, need, max_bytes);
  }
  void Uint(std::string_view k, uint64_t& v, Need need) {
    const msgpack::object* o = Find(k, need);
    if (o == nullptr) return;
    if (o->type == msgpack::type::NEGATIVE_INTEGER) {
      return Fail(k, InvalidRequest("expected unsigned integer, got negative " +
                                    std::to_string(o->via.i64)));
    }
    if (o->type != msgpack::type::POSITIVE_INTEGER) {
      return Fail(k, WrongType("unsigned integer", *o));
    }
    v = o->via.u64;
  }
  void Bool(std::string_view k, bool& v, Need need) {
    const msgpack::object* o = Find(k, need);
    if (o == nullptr) return;
    if (o->type != msgpack::type::BOOLEAN) return Fail(k, WrongType("bool", *o));
    v = o->via.boolean;
  }
  void Stream(std::string_view k, protocol::Stream& v) {
    uint64_t u = 0;
    Uint(k, u, Need::kRequired);
    if (!status_.ok()) return;
    if (u != 1 && u != 2) {
      return Fail(k, InvalidRequest(std::to_string(u) + " is not a valid value (1..2)"));
    }
    v = static_cast<protocol::Stream>(u);
  }

 private:
  const msgpack::object* Find(std::string_view key, Need need) {
    if (!status_.ok()) return nullptr;
    const msgpack::object* found = nullptr;
    for (uint32_t i = 0; i < map_.size; ++i) {
      if (View(map_.ptr[i].key) != key) continue;
      if (found != nullptr) {
        Fail(key, InvalidRequest("duplicate key"));
        return nullptr;
      }
      found = &map_.ptr[i].val;
    }
    if (found == nullptr && need == Need::kRequired) {
      Fail(key, InvalidRequest("required field is missing"));
    }
    return found;
  }
  void Fail(std::string_view key, const Status& st) {
    status_ = st.WithContext(std::string(name_) + "." + std::string(key));
  }

  const msgpack::object_map& map_;
  std::string_view name_;
  Status status_;
};

template <typename T>
StatusOr<Message> DecodeBody(const msgpack::object& body, MessageType type) {
  const char* name = TypeName(type);
  if (body.type != msgpack::type::MAP) return WrongType("map", body).WithContext(name);
  const msgpack::object_map& map = body.via.map;
  for (uint32_t i = 0; i < map.size; ++i) {
    if (!IsText(map.ptr[i].key)) {
      return InvalidRequest(std::string("map keys must be strings, got ") +
                            std::string(TypeLabel(map.ptr[i].key.type)))
          .WithContext(name);
    }
  }
  T message;
  BodyDecoder decoder(map, name);
  Describe(decoder, message);
  if (!decoder.status().ok()) return decoder.status();
  return Message{std::move(message)};
}

// The envelope checks of the worker codec, in the same order: version first.
Status CheckEnvelope(const msgpack::object& frame) {
  if (frame.type != msgpack::type::ARRAY) {
    return InvalidRequest(
        std::string("frame must be a MessagePack array [version, type, body], got ") +
        std::string(TypeLabel(frame.type)));
  }
  const msgpack::object_array& a = frame.via.array;
  if (a.size == 0) return InvalidRequest("frame is an empty array, expected [version, type, body]");
  const msgpack::object& version = a.ptr[0];
  if (version.type != msgpack::type::POSITIVE_INTEGER) {
    return InvalidRequest(std::string("protocol version must be an unsigned integer, got ") +
                          std::string(TypeLabel(version.type)));
  }
  if (version.via.u64 != kClientProtocolVersion) {
    return InvalidRequest("unsupported client protocol version " + std::to_string(version.via.u64) +
                          " (this side speaks " + std::to_string(kClientProtocolVersion) + ")");
  }
  if (a.size != 3) {
    return InvalidRequest("frame has " + std::to_string(a.size) +
                          " elements, expected 3 [version, type, body]");
  }
  if (a.ptr[1].type != msgpack::type::POSITIVE_INTEGER) {
    return InvalidRequest(std::string("message type must be an unsigned integer, got ") +
                          std::string(TypeLabel(a.ptr[1].type)));
  }
  return Status::Ok();
}

StatusOr<Message> DecodeFrame(const msgpack::object& frame) {
  RETURN_IF_ERROR(CheckEnvelope(frame));
  const msgpack::object& body = frame.via.array.ptr[2];
  switch (const uint64_t type = frame.via.array.ptr[1].via.u64) {
    case static_cast<uint64_t>(MessageType::kSubmit):
      return DecodeBody<Submit>(body, MessageType::kSubmit);
    case static_cast<uint64_t>(MessageType::kSubscribe):
      return DecodeBody<Subscribe>(body, MessageType::kSubscribe);
    case static_cast<uint64_t>(MessageType::kCancel):
      return DecodeBody<Cancel>(body, MessageType::kCancel);
    case static_cast<uint64_t>(MessageType::kGet):
      return DecodeBody<Get>(body, MessageType::kGet);
    case static_cast<uint64_t>(MessageType::kAccepted):
      return DecodeBody<Accepted>(body, MessageType::kAccepted);
    case static_cast<uint64_t>(MessageType::kOutput):
      return DecodeBody<Output>(body, MessageType::kOutput);
    case static_cast<uint64_t>(MessageType::kResult):
      return DecodeBody<Result>(body, MessageType::kResult);
    case static_cast<uint64_t>(MessageType::kError):
      return DecodeBody<Error>(body, MessageType::kError);
    default:
      return InvalidRequest("unknown message type " + std::to_string(type));
  }
}

}  // namespace

std::string Encode(const Message& message) {
  return std::visit(
      [&message](const auto& body) {
        FieldCounter counter;
        Describe(counter, body);
        std::string frame;
        frame.reserve(counter.bytes + 16);
        StringSink sink(&frame);
        Packer pk(sink);
        pk.pack_array(3);
        pk.pack_uint32(kClientProtocolVersion);
        pk.pack_uint8(static_cast<uint8_t>(TypeOf(message)));
        pk.pack_map(static_cast<uint32_t>(counter.fields));
        BodyEncoder encoder(pk);
        Describe(encoder, body);
        return frame;
      },
      message);
}

StatusOr<Message> Decode(std::string_view bytes) {
  std::optional<Message> message;
  Status st = ParseFrame(bytes, [&message](const msgpack::object& root) {
    StatusOr<Message> m = DecodeFrame(root);
    if (!m.ok()) return m.status();
    message = std::move(m).value();
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return std::move(*message);
}

uint64_t PeekRequestId(std::string_view bytes) {
  uint64_t id = 0;
  (void)ParseFrame(bytes, [&id](const msgpack::object& root) {
    if (!CheckEnvelope(root).ok()) return Status::Ok();
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
