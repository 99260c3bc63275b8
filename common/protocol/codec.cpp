// MessagePack codec for the wire messages; layout in docs/protocol.md.
//
// Each struct's fields are listed once, in a Describe() overload below, and
// that single list drives the three passes over a body: FieldCounter (map
// size and a size estimate before packing), BodyEncoder (packing) and
// BodyDecoder (validation and unpacking). Encoder and decoder cannot drift
// apart, and docs/protocol.md mirrors these lists.
//
// Decoding a frame takes two passes over the bytes:
//   1. FrameScanner, a msgpack visitor that builds nothing, checks that the
//      bytes are one complete MessagePack value with no trailing bytes and
//      enforces the structural bounds (entries per container, total entries,
//      nesting depth, str/bin/ext size) before anything is allocated.
//   2. msgpack::unpack with the same bounds as an unpack_limit (defence in
//      depth) and a reference function, so strings point into `bytes` instead
//      of being copied; then BodyDecoder walks the object tree directly.
// The pre-scan exists because msgpack::unpack allocates a container's
// elements as soon as it reads the header: without a bound on the total, a
// 64 MiB frame of nested one-byte values would cost over a gigabyte.

#include "common/protocol/codec.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <msgpack.hpp>
#include <new>
#include <type_traits>
#include <utility>

#include "common/protocol/frame_parser.hpp"

namespace kiln::common::protocol {
namespace {

// Structural bounds of a frame, enforced before and during unpacking. They
// are above every per-field limit in messages.hpp, so a legitimate frame never
// meets them and an over-limit field gets the per-field error naming it.
constexpr size_t kMaxContainerEntries = 1024;     // one array or map (env: 256)
constexpr size_t kMaxTotalObjects = 1u << 16;     // all container slots of a frame
constexpr size_t kMaxNesting = 8;                 // [v, t, {files: [{...}]}] is 4
constexpr size_t kMaxBlobBytes = kMaxFilesBytes;  // one str/bin/ext: a single file
constexpr size_t kNoIndex = std::numeric_limits<size_t>::max();

enum class Need { kRequired, kOptional };

// Each Describe() lists a struct's fields for a field visitor V. Decoding
// visitors (V::kDecodes) get the struct by mutable reference, the others by
// const reference.
template <typename V, typename T>
using Ref = std::conditional_t<V::kDecodes, T&, const T&>;

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
  v.Enum("reason", m.reason, Need::kRequired, EndReason::kExit, EndReason::kRefused);
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
  v.Uint("redactions", m.redactions, Need::kOptional);
  v.Uint("session_epoch", m.session_epoch, Need::kOptional);
  v.Bool("session_reset", m.session_reset, Need::kOptional);
  v.Text("worker_error", m.worker_error, Need::kOptional, kMaxStringBytes);
  v.Text("worker_error_code", m.worker_error_code, Need::kOptional, kMaxIdBytes);
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
void Describe(V& v, Ref<V, Disconnect> m) {
  v.Text("reason", m.reason, Need::kOptional, kMaxStringBytes);
}

// ---------------------------------------------------------------------------
// Encoding

// Counts the entries a body map will have and estimates its packed size.
class FieldCounter {
 public:
  static constexpr bool kDecodes = false;

  size_t fields() const { return fields_; }
  size_t bytes() const { return bytes_; }

  void Id(std::string_view key, const std::string& v) { Add(key, v.size()); }
  void Text(std::string_view key, const std::string& v, Need, size_t) { Add(key, v.size()); }
  void Bytes(std::string_view key, const std::string& v, Need, size_t) { Add(key, v.size()); }
  template <typename U>
  void Uint(std::string_view key, const U&, Need) {
    Add(key, 0);
  }
  template <typename E>
  void Enum(std::string_view key, const E&, Need, E, E) {
    Add(key, 0);
  }
  void Bool(std::string_view key, const bool&, Need) { Add(key, 0); }
  void Double(std::string_view key, const double&, Need) { Add(key, 0); }
  void OptionalInt(std::string_view key, const std::optional<int32_t>& v) {
    if (v.has_value()) Add(key, 0);
  }
  void TextList(std::string_view key, const std::vector<std::string>& v, Need,
                size_t = kMaxListEntries, size_t = kMaxStringBytes) {
    size_t n = 0;
    for (const std::string& s : v) n += s.size() + kOverhead;
    Add(key, n);
  }
  void TextMap(std::string_view key, const std::map<std::string, std::string>& v, Need) {
    size_t n = 0;
    for (const auto& [name, value] : v) n += name.size() + value.size() + 2 * kOverhead;
    Add(key, n);
  }
  void Files(std::string_view key, const std::vector<FileEntry>& v, Need) {
    size_t n = 0;
    for (const FileEntry& f : v) n += f.path.size() + f.content.size() + 32;
    Add(key, n);
  }
  template <typename T>
  void Struct(std::string_view key, const T& v, Need) {
    FieldCounter inner;
    Describe(inner, v);
    Add(key, inner.bytes());
  }
  template <typename T>
  void OptionalStruct(std::string_view key, const std::optional<T>& v) {
    if (v.has_value()) Struct(key, *v, Need::kOptional);
  }

 private:
  static constexpr size_t kOverhead = 9;  // the largest header of one value

  void Add(std::string_view key, size_t value_bytes) {
    ++fields_;
    bytes_ += key.size() + value_bytes + 2 * kOverhead;
  }

  size_t fields_ = 0;
  size_t bytes_ = 0;
};

// The msgpack packer's output stream: appends straight to the frame string,
// which is reserved up front, so the packed bytes are never copied again.
class StringSink {
 public:
  explicit StringSink(std::string* out) : out_(out) {}
  void write(const char* data, size_t size) { out_->append(data, size); }

 private:
  std::string* out_;
};

using Packer = msgpack::packer<StringSink>;

void PackStr(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

void PackBin(Packer& pk, std::string_view s) {
  pk.pack_bin(static_cast<uint32_t>(s.size()));
  pk.pack_bin_body(s.data(), static_cast<uint32_t>(s.size()));
}

template <typename T>
void PackMap(Packer& pk, StringSink& sink, const T& value);

// Packs each field as a key and a value; every field is written except empty
// optionals, so a frame is self-describing and defaults need no agreement.
class BodyEncoder {
 public:
  static constexpr bool kDecodes = false;

  BodyEncoder(Packer& pk, StringSink& sink) : pk_(pk), sink_(sink) {}

  void Id(std::string_view key, const std::string& v) { Text(key, v, Need::kRequired, 0); }
  void Text(std::string_view key, const std::string& v, Need, size_t) {
    PackStr(pk_, key);
    PackStr(pk_, v);
  }
  void Bytes(std::string_view key, const std::string& v, Need, size_t) {
    PackStr(pk_, key);
    PackBin(pk_, v);
  }
  template <typename U>
  void Uint(std::string_view key, const U& v, Need) {
    PackStr(pk_, key);
    pk_.pack_uint64(v);
  }
  template <typename E>
  void Enum(std::string_view key, const E& v, Need, E, E) {
    PackStr(pk_, key);
    pk_.pack_uint64(static_cast<uint64_t>(v));
  }
  void Bool(std::string_view key, const bool& v, Need) {
    PackStr(pk_, key);
    if (v) {
      pk_.pack_true();
    } else {
      pk_.pack_false();
    }
  }
  // Always float64: msgpack-c's pack_double would write whole values as integers.
  void Double(std::string_view key, const double& v, Need) {
    PackStr(pk_, key);
    const auto bits = std::bit_cast<uint64_t>(v);
    char b[9] = {static_cast<char>(0xcb)};
    for (int i = 0; i < 8; ++i) b[1 + i] = static_cast<char>(bits >> (8 * (7 - i)));
    sink_.write(b, sizeof(b));
  }
  void OptionalInt(std::string_view key, const std::optional<int32_t>& v) {
    if (!v.has_value()) return;
    PackStr(pk_, key);
    pk_.pack_int64(*v);
  }
  void TextList(std::string_view key, const std::vector<std::string>& v, Need,
                size_t = kMaxListEntries, size_t = kMaxStringBytes) {
    PackStr(pk_, key);
    pk_.pack_array(static_cast<uint32_t>(v.size()));
    for (const std::string& s : v) PackStr(pk_, s);
  }
  void TextMap(std::string_view key, const std::map<std::string, std::string>& v, Need) {
    PackStr(pk_, key);
    pk_.pack_map(static_cast<uint32_t>(v.size()));
    for (const auto& [name, value] : v) {
      PackStr(pk_, name);
      PackStr(pk_, value);
    }
  }
  void Files(std::string_view key, const std::vector<FileEntry>& v, Need) {
    PackStr(pk_, key);
    pk_.pack_array(static_cast<uint32_t>(v.size()));
    for (const FileEntry& f : v) PackMap(pk_, sink_, f);
  }
  template <typename T>
  void Struct(std::string_view key, const T& v, Need) {
    PackStr(pk_, key);
    PackMap(pk_, sink_, v);
  }
  template <typename T>
  void OptionalStruct(std::string_view key, const std::optional<T>& v) {
    if (v.has_value()) Struct(key, *v, Need::kOptional);
  }

 private:
  Packer& pk_;
  StringSink& sink_;  // pk_'s stream, for values written by hand
};

template <typename T>
void PackMap(Packer& pk, StringSink& sink, const T& value) {
  FieldCounter counter;
  Describe(counter, value);
  pk.pack_map(static_cast<uint32_t>(counter.fields()));
  BodyEncoder encoder(pk, sink);
  Describe(encoder, value);
}

// ---------------------------------------------------------------------------
// Decoding, pass 1: structural pre-scan.

// A msgpack visitor that builds nothing and stops at the first structural
// bound exceeded. Its methods hide null_visitor's (msgpack::parse is a
// template over the visitor type, not virtual dispatch).
class FrameScanner : public msgpack::null_visitor {
 public:
  const std::string& error() const { return error_; }

  bool visit_str(const char*, uint32_t size) { return Blob("str", size); }
  bool visit_bin(const char*, uint32_t size) { return Blob("bin", size); }
  bool visit_ext(const char*, uint32_t size) { return Blob("ext", size); }
  bool start_array(uint32_t n) { return Open("array", n, n); }
  bool end_array() { return Close(); }
  bool start_map(uint32_t n) { return Open("map", n, 2 * static_cast<uint64_t>(n)); }
  bool end_map() { return Close(); }
  void parse_error(size_t, size_t error_offset) {
    error_ = "malformed MessagePack at byte " + std::to_string(error_offset);
  }
  void insufficient_bytes(size_t, size_t) { error_ = "truncated frame: the message is incomplete"; }

 private:
  bool Blob(std::string_view what, uint32_t size) {
    if (size <= kMaxBlobBytes) return true;
    error_ = std::string(what) + " of " + std::to_string(size) + " bytes exceeds the limit of " +
             std::to_string(kMaxBlobBytes);
    return false;
  }
  bool Open(std::string_view what, uint32_t n, uint64_t objects) {
    if (++depth_ > kMaxNesting) {
      error_ = "nesting deeper than " + std::to_string(kMaxNesting) + " levels";
      return false;
    }
    if (n > kMaxContainerEntries) {
      error_ = std::string(what) + " of " + std::to_string(n) + " entries exceeds the limit of " +
               std::to_string(kMaxContainerEntries);
      return false;
    }
    objects_ += objects;
    if (objects_ > kMaxTotalObjects) {
      error_ = "more than " + std::to_string(kMaxTotalObjects) + " values in one frame";
      return false;
    }
    return true;
  }
  bool Close() {
    --depth_;
    return true;
  }

  size_t depth_ = 0;
  uint64_t objects_ = 0;
  std::string error_;
};

// ---------------------------------------------------------------------------
// Decoding, pass 2: the object tree.

// Names a map inside the frame for error messages: "execute",
// "execute.limits", "execute.files[3]". Built into a string only on error.
struct Path {
  const Path* parent = nullptr;
  std::string_view name;
  size_t index = kNoIndex;

  std::string ToString() const {
    std::string s = parent != nullptr ? parent->ToString() + "." : std::string();
    s += name;
    if (index != kNoIndex) s += "[" + std::to_string(index) + "]";
    return s;
  }
};

Status TooMany(size_t n, size_t limit) {
  return InvalidRequest(std::to_string(n) + " entries exceeds the limit of " +
                        std::to_string(limit));
}

// The value-level checks; BodyDecoder prefixes the field's name.
Status ReadText(const msgpack::object& o, size_t max_bytes, std::string* out) {
  if (!IsText(o)) return WrongType("str or bin", o);
  std::string_view s = View(o);
  if (s.size() > max_bytes) {
    return InvalidRequest(std::to_string(s.size()) + " bytes exceeds the limit of " +
                          std::to_string(max_bytes));
  }
  out->assign(s);
  return Status::Ok();
}

Status ReadUint(const msgpack::object& o, uint64_t max, uint64_t* out) {
  if (o.type == msgpack::type::NEGATIVE_INTEGER) {
    return InvalidRequest("expected unsigned integer, got negative " + std::to_string(o.via.i64));
  }
  if (o.type != msgpack::type::POSITIVE_INTEGER) return WrongType("unsigned integer", o);
  if (o.via.u64 > max) {
    return InvalidRequest(std::to_string(o.via.u64) + " exceeds the maximum " +
                          std::to_string(max));
  }
  *out = o.via.u64;
  return Status::Ok();
}

Status ReadInt32(const msgpack::object& o, int32_t* out) {
  constexpr int64_t kMin = std::numeric_limits<int32_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (o.type == msgpack::type::POSITIVE_INTEGER) {
    if (o.via.u64 > static_cast<uint64_t>(kMax)) {
      return InvalidRequest(std::to_string(o.via.u64) + " is outside the int32 range");
    }
    *out = static_cast<int32_t>(o.via.u64);
    return Status::Ok();
  }
  if (o.type == msgpack::type::NEGATIVE_INTEGER) {
    if (o.via.i64 < kMin) {
      return InvalidRequest(std::to_string(o.via.i64) + " is outside the int32 range");
    }
    *out = static_cast<int32_t>(o.via.i64);
    return Status::Ok();
  }
  return WrongType("integer", o);
}

Status ReadDouble(const msgpack::object& o, double* out) {
  double d = 0;
  if (o.type == msgpack::type::FLOAT32 || o.type == msgpack::type::FLOAT64) {
    d = o.via.f64;
  } else if (o.type == msgpack::type::POSITIVE_INTEGER) {
    d = static_cast<double>(o.via.u64);
  } else if (o.type == msgpack::type::NEGATIVE_INTEGER) {
    d = static_cast<double>(o.via.i64);
  } else {
    return WrongType("number", o);
  }
  if (!std::isfinite(d) || d < 0) return InvalidRequest("expected a finite number >= 0");
  *out = d;
  return Status::Ok();
}

template <typename T>
Status DecodeMap(const msgpack::object& o, const Path& path, T* out);

// Reads the fields Describe() lists out of one map, stopping at the first
// error. Keys are looked up by a linear scan, which also catches duplicates.
class BodyDecoder {
 public:
  static constexpr bool kDecodes = true;

  BodyDecoder(const msgpack::object_map& map, const Path& path) : map_(map), path_(path) {}

  const Status& status() const { return status_; }

  void Id(std::string_view key, std::string& v) {
    const msgpack::object* o = Find(key, Need::kRequired);
    if (o == nullptr) return;
    Check(key, ReadText(*o, kMaxIdBytes, &v));
    if (status_.ok() && v.empty()) Check(key, InvalidRequest("must not be empty"));
  }
  void Text(std::string_view key, std::string& v, Need need, size_t max_bytes) {
    if (const msgpack::object* o = Find(key, need)) Check(key, ReadText(*o, max_bytes, &v));
  }
  void Bytes(std::string_view key, std::string& v, Need need, size_t max_bytes) {
    Text(key, v, need, max_bytes);
  }
  template <typename U>
  void Uint(std::string_view key, U& v, Need need) {
    static_assert(std::is_unsigned_v<U>);
    const msgpack::object* o = Find(key, need);
    if (o == nullptr) return;
    uint64_t u = 0;
    Check(key, ReadUint(*o, std::numeric_limits<U>::max(), &u));
    if (status_.ok()) v = static_cast<U>(u);
  }
  template <typename E>
  void Enum(std::string_view key, E& v, Need need, E first, E last) {
    const msgpack::object* o = Find(key, need);
    if (o == nullptr) return;
    uint64_t u = 0;
    Check(key, ReadUint(*o, std::numeric_limits<uint64_t>::max(), &u));
    if (!status_.ok()) return;
    const auto lo = static_cast<uint64_t>(first);
    const auto hi = static_cast<uint64_t>(last);
    if (u < lo || u > hi) {
      Check(key, InvalidRequest(std::to_string(u) + " is not a valid value (" + std::to_string(lo) +
                                ".." + std::to_string(hi) + ")"));
      return;
    }
    v = static_cast<E>(u);
  }
  void Bool(std::string_view key, bool& v, Need need) {
    const msgpack::object* o = Find(key, need);
    if (o == nullptr) return;
    if (o->type != msgpack::type::BOOLEAN) {
      Check(key, WrongType("bool", *o));
      return;
    }
    v = o->via.boolean;
  }
  void Double(std::string_view key, double& v, Need need) {
    if (const msgpack::object* o = Find(key, need)) Check(key, ReadDouble(*o, &v));
  }
  // nil is read as absent, for encoders that write null for "no value".
  void OptionalInt(std::string_view key, std::optional<int32_t>& v) {
    const msgpack::object* o = Find(key, Need::kOptional);
    if (o == nullptr || o->type == msgpack::type::NIL) return;
    int32_t i = 0;
    Check(key, ReadInt32(*o, &i));
    if (status_.ok()) v = i;
  }
  void TextList(std::string_view key, std::vector<std::string>& v, Need need,
                size_t max_entries = kMaxListEntries, size_t max_bytes = kMaxStringBytes) {
    const msgpack::object* o = Find(key, need);
    if (o == nullptr) return;
    if (o->type != msgpack::type::ARRAY) return Check(key, WrongType("array", *o));
    const msgpack::object_array& a = o->via.array;
    if (a.size > max_entries) return Check(key, TooMany(a.size, max_entries));
    v.resize(a.size);
    for (uint32_t i = 0; i < a.size && status_.ok(); ++i) {
      Check(key, ReadText(a.ptr[i], max_bytes, &v[i]), i);
    }
  }
  void TextMap(std::string_view key, std::map<std::string, std::string>& v, Need need) {
    const msgpack::object* o = Find(key, need);
    if (o == nullptr) return;
    if (o->type != msgpack::type::MAP) return Check(key, WrongType("map", *o));
    const msgpack::object_map& m = o->via.map;
    if (m.size > kMaxEnvEntries) return Check(key, TooMany(m.size, kMaxEnvEntries));
    for (uint32_t i = 0; i < m.size && status_.ok(); ++i) {
      std::string name;
      std::string value;
      Check(key, ReadText(m.ptr[i].key, kMaxStringBytes, &name).WithContext("name"), i);
      if (status_.ok()) {
        Check(key, ReadText(m.ptr[i].val, kMaxStringBytes, &value).WithContext("value"), i);
      }
      if (status_.ok() && !v.emplace(std::move(name), std::move(value)).second) {
        Check(key, InvalidRequest("duplicate name"), i);
      }
    }
  }
  void Files(std::string_view key, std::vector<FileEntry>& v, Need need) {
    const msgpack::object* o = Find(key, need);
    if (o == nullptr) return;
    if (o->type != msgpack::type::ARRAY) return Check(key, WrongType("array", *o));
    const msgpack::object_array& a = o->via.array;
    if (a.size > kMaxFiles) return Check(key, TooMany(a.size, kMaxFiles));
    v.resize(a.size);
    size_t total = 0;
    for (uint32_t i = 0; i < a.size && status_.ok(); ++i) {
      const Path entry{&path_, key, i};
      status_ = DecodeMap(a.ptr[i], entry, &v[i]);
      total += v[i].content.size();
    }
    if (status_.ok() && total > kMaxFilesBytes) {
      Check(key,
            InvalidRequest("contents total " + std::to_string(total) +
                           " bytes, exceeding the limit of " + std::to_string(kMaxFilesBytes)));
    }
  }
  template <typename T>
  void Struct(std::string_view key, T& v, Need need) {
    const msgpack::object* o = Find(key, need);
    if (o == nullptr) return;
    const Path inner{&path_, key};
    status_ = DecodeMap(*o, inner, &v);
  }
  // nil is read as absent, as for OptionalInt.
  template <typename T>
  void OptionalStruct(std::string_view key, std::optional<T>& v) {
    const msgpack::object* o = Find(key, Need::kOptional);
    if (o == nullptr || o->type == msgpack::type::NIL) return;
    const Path inner{&path_, key};
    T value;
    status_ = DecodeMap(*o, inner, &value);
    if (status_.ok()) v = std::move(value);
  }

 private:
  // The value under `key`, or nullptr when it is absent (an error when it is
  // required), when it appears twice (an error), or after an earlier error.
  const msgpack::object* Find(std::string_view key, Need need) {
    if (!status_.ok()) return nullptr;
    const msgpack::object* found = nullptr;
    for (uint32_t i = 0; i < map_.size; ++i) {
      if (View(map_.ptr[i].key) != key) continue;
      if (found != nullptr) {
        Check(key, InvalidRequest("duplicate key"));
        return nullptr;
      }
      found = &map_.ptr[i].val;
    }
    if (found == nullptr && need == Need::kRequired) {
      Check(key, InvalidRequest("required field is missing"));
    }
    return found;
  }

  // Records `st`, prefixed with the field's path, if it is an error.
  void Check(std::string_view key, const Status& st, size_t index = kNoIndex) {
    if (st.ok()) return;
    status_ = st.WithContext(Path{&path_, key, index}.ToString());
  }

  const msgpack::object_map& map_;
  const Path& path_;
  Status status_;
};

template <typename T>
Status DecodeMap(const msgpack::object& o, const Path& path, T* out) {
  if (o.type != msgpack::type::MAP) {
    return WrongType("map", o).WithContext(path.ToString());
  }
  const msgpack::object_map& map = o.via.map;
  for (uint32_t i = 0; i < map.size; ++i) {
    if (!IsText(map.ptr[i].key)) {
      return InvalidRequest("map keys must be strings, got " +
                            std::string(TypeLabel(map.ptr[i].key.type)))
          .WithContext(path.ToString());
    }
  }
  BodyDecoder decoder(map, path);
  Describe(decoder, *out);
  return decoder.status();
}

template <typename T>
StatusOr<Message> DecodeBody(const msgpack::object& body, MessageType type) {
  const Path path{nullptr, TypeName(type)};
  T message;
  Status st = DecodeMap(body, path, &message);
  if (!st.ok()) return st;
  return Message{std::move(message)};
}

StatusOr<Message> DecodeFrame(const msgpack::object& frame) {
  if (frame.type != msgpack::type::ARRAY) {
    return InvalidRequest("frame must be a MessagePack array [version, type, body], got " +
                          std::string(TypeLabel(frame.type)));
  }
  const msgpack::object_array& a = frame.via.array;
  // The version comes first so a future envelope is reported as a version
  // mismatch rather than as a malformed frame.
  if (a.size == 0) return InvalidRequest("frame is an empty array, expected [version, type, body]");
  const msgpack::object& version = a.ptr[0];
  if (version.type != msgpack::type::POSITIVE_INTEGER) {
    return InvalidRequest("protocol version must be an unsigned integer, got " +
                          std::string(TypeLabel(version.type)));
  }
  if (version.via.u64 != kProtocolVersion) {
    return InvalidRequest("unsupported protocol version " + std::to_string(version.via.u64) +
                          " (this side speaks " + std::to_string(kProtocolVersion) + ")");
  }
  if (a.size != 3) {
    return InvalidRequest("frame has " + std::to_string(a.size) +
                          " elements, expected 3 [version, type, body]");
  }
  const msgpack::object& type = a.ptr[1];
  if (type.type != msgpack::type::POSITIVE_INTEGER) {
    return InvalidRequest("message type must be an unsigned integer, got " +
                          std::string(TypeLabel(type.type)));
  }
  const msgpack::object& body = a.ptr[2];
  switch (type.via.u64) {
    case static_cast<uint64_t>(MessageType::kRegister):
      return DecodeBody<Register>(body, MessageType::kRegister);
    case static_cast<uint64_t>(MessageType::kRegisterAck):
      return DecodeBody<RegisterAck>(body, MessageType::kRegisterAck);
    case static_cast<uint64_t>(MessageType::kHeartbeat):
      return DecodeBody<Heartbeat>(body, MessageType::kHeartbeat);
    case static_cast<uint64_t>(MessageType::kExecute):
      return DecodeBody<Execute>(body, MessageType::kExecute);
    case static_cast<uint64_t>(MessageType::kOutputChunk):
      return DecodeBody<OutputChunk>(body, MessageType::kOutputChunk);
    case static_cast<uint64_t>(MessageType::kResult):
      return DecodeBody<Result>(body, MessageType::kResult);
    case static_cast<uint64_t>(MessageType::kCancel):
      return DecodeBody<Cancel>(body, MessageType::kCancel);
    case static_cast<uint64_t>(MessageType::kDisconnect):
      return DecodeBody<Disconnect>(body, MessageType::kDisconnect);
    case static_cast<uint64_t>(MessageType::kCloseSession):
      return DecodeBody<CloseSession>(body, MessageType::kCloseSession);
    case static_cast<uint64_t>(MessageType::kResultAck):
      return DecodeBody<ResultAck>(body, MessageType::kResultAck);
    default:
      return InvalidRequest("unknown message type " + std::to_string(type.via.u64));
  }
}

// Strings and bins point into the caller's bytes instead of being copied into
// the zone; the tree never outlives Decode.
bool ReferenceInPlace(msgpack::type::object_type, size_t, void*) { return true; }

}  // namespace

std::string Encode(const Message& message) {
  return std::visit(
      [&message](const auto& body) {
        FieldCounter counter;
        Describe(counter, body);
        std::string frame;
        frame.reserve(counter.bytes() + 16);
        StringSink sink(&frame);
        Packer pk(sink);
        pk.pack_array(3);
        pk.pack_uint32(kProtocolVersion);
        pk.pack_uint8(static_cast<uint8_t>(TypeOf(message)));
        pk.pack_map(static_cast<uint32_t>(counter.fields()));
        BodyEncoder encoder(pk, sink);
        Describe(encoder, body);
        return frame;
      },
      message);
}

std::string_view TypeLabel(msgpack::type::object_type t) {
  switch (t) {
    case msgpack::type::NIL:
      return "nil";
    case msgpack::type::BOOLEAN:
      return "bool";
    case msgpack::type::POSITIVE_INTEGER:
      return "unsigned integer";
    case msgpack::type::NEGATIVE_INTEGER:
      return "negative integer";
    case msgpack::type::FLOAT32:
      return "float32";
    case msgpack::type::FLOAT64:
      return "float64";
    case msgpack::type::STR:
      return "str";
    case msgpack::type::BIN:
      return "bin";
    case msgpack::type::ARRAY:
      return "array";
    case msgpack::type::MAP:
      return "map";
    case msgpack::type::EXT:
      return "ext";
  }
  return "unknown";
}

std::string_view View(const msgpack::object& o) {
  return o.type == msgpack::type::STR ? std::string_view(o.via.str.ptr, o.via.str.size)
                                      : std::string_view(o.via.bin.ptr, o.via.bin.size);
}

bool IsText(const msgpack::object& o) {
  return o.type == msgpack::type::STR || o.type == msgpack::type::BIN;
}

Status WrongType(std::string_view expected, const msgpack::object& o) {
  return InvalidRequest("expected " + std::string(expected) + ", got " +
                        std::string(TypeLabel(o.type)));
}

Status ParseFrame(std::string_view bytes,
                  const std::function<Status(const msgpack::object& root)>& visit) {
  if (bytes.size() > kMaxMessageBytes) {
    return InvalidRequest("frame of " + std::to_string(bytes.size()) +
                          " bytes exceeds the limit of " + std::to_string(kMaxMessageBytes));
  }
  if (bytes.empty()) return InvalidRequest("empty frame");
  try {
    FrameScanner scanner;
    size_t end = 0;
    if (!msgpack::parse(bytes.data(), bytes.size(), end, scanner)) {
      return InvalidRequest(scanner.error().empty() ? "malformed MessagePack" : scanner.error());
    }
    if (end != bytes.size()) {
      return InvalidRequest(std::to_string(bytes.size() - end) +
                            " trailing bytes after the message");
    }
    const msgpack::unpack_limit limit(kMaxContainerEntries, kMaxContainerEntries, kMaxBlobBytes,
                                      kMaxBlobBytes, kMaxBlobBytes, kMaxNesting);
    size_t offset = 0;
    msgpack::object_handle handle =
        msgpack::unpack(bytes.data(), bytes.size(), offset, ReferenceInPlace, nullptr, limit);
    return visit(handle.get());
  } catch (const msgpack::insufficient_bytes&) {
    return InvalidRequest("truncated frame: the message is incomplete");
  } catch (const msgpack::size_overflow& e) {
    return InvalidRequest(std::string("frame exceeds a structural limit: ") + e.what());
  } catch (const msgpack::unpack_error& e) {
    return InvalidRequest(std::string("malformed MessagePack: ") + e.what());
  } catch (const std::bad_alloc&) {
    return Internal("out of memory decoding a frame of " + std::to_string(bytes.size()) + " bytes");
  } catch (const std::exception& e) {
    return InvalidRequest(std::string("undecodable frame: ") + e.what());
  } catch (...) {
    return InvalidRequest("undecodable frame");
  }
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

}  // namespace kiln::common::protocol
