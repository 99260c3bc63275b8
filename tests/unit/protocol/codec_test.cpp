// Tests of the wire codec (common/protocol/codec.hpp): round trips, the frame
// layout, and the decoder's rejection of every kind of bad input.
//
// Bad frames are built by encoding a valid message, turning it into a small
// editable tree (Value), changing one thing, and packing it again, so every
// case differs from a valid frame in exactly the way the test names.

#include "common/protocol/codec.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <msgpack.hpp>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/protocol/messages.hpp"
#include "tests/unit/protocol/sample_messages.hpp"

namespace kiln::common::protocol {
namespace {

using samples::FullMessages;
using samples::MinimalMessages;

// ---------------------------------------------------------------------------
// An editable MessagePack value, for building frames byte by byte.

struct Entry;

struct Value {
  enum class Kind { kNil, kBool, kUint, kInt, kFloat32, kFloat64, kStr, kBin, kArray, kMap, kRaw };
  Kind kind = Kind::kNil;
  bool b = false;
  uint64_t u = 0;
  int64_t i = 0;
  double d = 0;
  std::string s;               // str, bin, or raw bytes written as they are
  std::vector<Value> items;    // array
  std::vector<Entry> entries;  // map
};

struct Entry {
  Value key;
  Value val;
};

Value Nil() { return {}; }
Value Bool(bool b) { return {.kind = Value::Kind::kBool, .b = b}; }
Value U(uint64_t u) { return {.kind = Value::Kind::kUint, .u = u}; }
Value I(int64_t i) { return {.kind = Value::Kind::kInt, .i = i}; }
Value F32(float d) { return {.kind = Value::Kind::kFloat32, .d = d}; }
Value F64(double d) { return {.kind = Value::Kind::kFloat64, .d = d}; }
Value Str(std::string s) { return {.kind = Value::Kind::kStr, .s = std::move(s)}; }
Value Bin(std::string s) { return {.kind = Value::Kind::kBin, .s = std::move(s)}; }
Value Raw(std::string s) { return {.kind = Value::Kind::kRaw, .s = std::move(s)}; }
Value Arr(std::vector<Value> items) {
  return {.kind = Value::Kind::kArray, .items = std::move(items)};
}
Value Map(std::vector<Entry> entries) {
  return {.kind = Value::Kind::kMap, .entries = std::move(entries)};
}

Value FromObject(const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::NIL:
      return Nil();
    case msgpack::type::BOOLEAN:
      return Bool(o.via.boolean);
    case msgpack::type::POSITIVE_INTEGER:
      return U(o.via.u64);
    case msgpack::type::NEGATIVE_INTEGER:
      return I(o.via.i64);
    case msgpack::type::FLOAT32:
      return F32(static_cast<float>(o.via.f64));
    case msgpack::type::FLOAT64:
      return F64(o.via.f64);
    case msgpack::type::STR:
      return Str(std::string(o.via.str.ptr, o.via.str.size));
    case msgpack::type::BIN:
      return Bin(std::string(o.via.bin.ptr, o.via.bin.size));
    case msgpack::type::ARRAY: {
      Value v = Arr({});
      for (uint32_t i = 0; i < o.via.array.size; ++i)
        v.items.push_back(FromObject(o.via.array.ptr[i]));
      return v;
    }
    case msgpack::type::MAP: {
      Value v = Map({});
      for (uint32_t i = 0; i < o.via.map.size; ++i) {
        v.entries.push_back({FromObject(o.via.map.ptr[i].key), FromObject(o.via.map.ptr[i].val)});
      }
      return v;
    }
    case msgpack::type::EXT:
      break;
  }
  ADD_FAILURE() << "unexpected msgpack type " << o.type;
  return Nil();
}

void PackValue(msgpack::packer<msgpack::sbuffer>& pk, msgpack::sbuffer& buf, const Value& v) {
  switch (v.kind) {
    case Value::Kind::kNil:
      pk.pack_nil();
      break;
    case Value::Kind::kBool:
      v.b ? pk.pack_true() : pk.pack_false();
      break;
    case Value::Kind::kUint:
      pk.pack_uint64(v.u);
      break;
    case Value::Kind::kInt:
      pk.pack_int64(v.i);
      break;
    // Written by hand: msgpack-c packs whole-valued floats as integers.
    case Value::Kind::kFloat32: {
      const auto bits = std::bit_cast<uint32_t>(static_cast<float>(v.d));
      char b[5] = {'\xca'};
      for (int k = 0; k < 4; ++k) b[1 + k] = static_cast<char>(bits >> (8 * (3 - k)));
      buf.write(b, sizeof(b));
      break;
    }
    case Value::Kind::kFloat64: {
      const auto bits = std::bit_cast<uint64_t>(v.d);
      char b[9] = {'\xcb'};
      for (int k = 0; k < 8; ++k) b[1 + k] = static_cast<char>(bits >> (8 * (7 - k)));
      buf.write(b, sizeof(b));
      break;
    }
    case Value::Kind::kStr:
      pk.pack_str(static_cast<uint32_t>(v.s.size()));
      pk.pack_str_body(v.s.data(), static_cast<uint32_t>(v.s.size()));
      break;
    case Value::Kind::kBin:
      pk.pack_bin(static_cast<uint32_t>(v.s.size()));
      pk.pack_bin_body(v.s.data(), static_cast<uint32_t>(v.s.size()));
      break;
    case Value::Kind::kRaw:
      buf.write(v.s.data(), v.s.size());
      break;
    case Value::Kind::kArray:
      pk.pack_array(static_cast<uint32_t>(v.items.size()));
      for (const Value& item : v.items) PackValue(pk, buf, item);
      break;
    case Value::Kind::kMap:
      pk.pack_map(static_cast<uint32_t>(v.entries.size()));
      for (const auto& [key, val] : v.entries) {
        PackValue(pk, buf, key);
        PackValue(pk, buf, val);
      }
      break;
  }
}

std::string Pack(const Value& v) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  PackValue(pk, buf, v);
  return std::string(buf.data(), buf.size());
}

Value ToValue(std::string_view bytes) {
  msgpack::object_handle oh = msgpack::unpack(bytes.data(), bytes.size());
  return FromObject(oh.get());
}

// The frame of `m` as a tree: [version, type, body].
Value FrameOf(const Message& m) { return ToValue(Encode(m)); }

const Message& Full(MessageType t) {
  static const std::vector<Message> full = FullMessages();
  return full.at(static_cast<size_t>(t) - 1);
}

Value* Lookup(Value& map, std::string_view key) {
  for (auto& [k, v] : map.entries) {
    if (k.s == key) return &v;
  }
  return nullptr;
}

// The value at `path` inside the body: map keys, or decimal indexes into arrays.
Value& At(Value& frame, const std::vector<std::string>& path) {
  Value* v = &frame.items.at(2);
  for (const std::string& step : path) {
    if (v->kind == Value::Kind::kArray) {
      v = &v->items.at(std::stoul(step));
    } else {
      Value* next = Lookup(*v, step);
      if (next == nullptr) throw std::runtime_error("test bug: no key " + step);
      v = next;
    }
  }
  return *v;
}

// Replaces (or adds) `path`'s last key in its parent map.
void Set(Value& frame, std::vector<std::string> path, Value value) {
  std::string key = path.back();
  path.pop_back();
  Value& parent = At(frame, path);
  if (Value* existing = Lookup(parent, key)) {
    *existing = std::move(value);
  } else {
    parent.entries.push_back({Str(key), std::move(value)});
  }
}

void Erase(Value& frame, std::vector<std::string> path) {
  std::string key = path.back();
  path.pop_back();
  Value& parent = At(frame, path);
  std::erase_if(parent.entries, [&](const auto& kv) { return kv.key.s == key; });
}

StatusOr<Message> DecodeValue(const Value& frame) { return Decode(Pack(frame)); }

// The frame of the full message of type `t` with `path` set to `value`.
StatusOr<Message> DecodeWith(MessageType t, const std::vector<std::string>& path, Value value) {
  Value frame = FrameOf(Full(t));
  Set(frame, path, std::move(value));
  return DecodeValue(frame);
}

::testing::AssertionResult IsInvalid(const StatusOr<Message>& r, std::string_view needle) {
  if (r.ok()) return ::testing::AssertionFailure() << "decoded OK, expected an error";
  if (r.status().code() != Code::kInvalidRequest) {
    return ::testing::AssertionFailure() << "wrong code: " << r.status().ToString();
  }
  if (r.status().message().find(needle) == std::string::npos) {
    return ::testing::AssertionFailure()
           << "message \"" << r.status().message() << "\" lacks \"" << needle << "\"";
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult IsOk(const StatusOr<Message>& r) {
  if (r.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << r.status().ToString();
}

std::string Join(const std::vector<std::string>& path) {
  std::string s;
  for (const std::string& p : path) s += (s.empty() ? "" : "/") + p;
  return s;
}

// ---------------------------------------------------------------------------
// Names

TEST(MessagesTest, TypeOfAndNames) {
  const std::vector<Message> full = FullMessages();
  const std::vector<std::string> names = {
      "register", "register_ack", "heartbeat",     "execute",    "output_chunk", "result",
      "cancel",   "disconnect",   "close_session", "result_ack", "tool_call",    "tool_result"};
  ASSERT_EQ(full.size(), names.size());
  for (size_t i = 0; i < full.size(); ++i) {
    EXPECT_EQ(static_cast<size_t>(TypeOf(full[i])), i + 1);
    EXPECT_STREQ(TypeName(TypeOf(full[i])), names[i].c_str());
  }
  EXPECT_STREQ(TypeName(static_cast<MessageType>(99)), "unknown");
}

TEST(MessagesTest, EndReasonNames) {
  EXPECT_STREQ(EndReasonName(EndReason::kExit), "exit");
  EXPECT_STREQ(EndReasonName(EndReason::kTimeout), "timeout");
  EXPECT_STREQ(EndReasonName(EndReason::kMemoryExceeded), "memory_exceeded");
  EXPECT_STREQ(EndReasonName(EndReason::kOutputLimit), "output_limit");
  EXPECT_STREQ(EndReasonName(EndReason::kCancelled), "cancelled");
  EXPECT_STREQ(EndReasonName(EndReason::kSandboxViolation), "sandbox_violation");
  EXPECT_STREQ(EndReasonName(EndReason::kError), "error");
  EXPECT_STREQ(EndReasonName(static_cast<EndReason>(0)), "unknown");
}

// ---------------------------------------------------------------------------
// Round trips and layout

TEST(CodecRoundTripTest, EveryTypeWithEveryField) {
  std::set<MessageType> seen;
  for (const Message& m : FullMessages()) {
    SCOPED_TRACE(TypeName(TypeOf(m)));
    seen.insert(TypeOf(m));
    StatusOr<Message> back = Decode(Encode(m));
    ASSERT_TRUE(IsOk(back));
    EXPECT_EQ(*back, m);
  }
  EXPECT_EQ(seen.size(), 12u);
}

TEST(CodecRoundTripTest, EveryTypeWithOnlyRequiredFields) {
  std::set<MessageType> seen;
  for (const Message& m : MinimalMessages()) {
    SCOPED_TRACE(TypeName(TypeOf(m)));
    seen.insert(TypeOf(m));
    StatusOr<Message> back = Decode(Encode(m));
    ASSERT_TRUE(IsOk(back));
    EXPECT_EQ(*back, m);
  }
  EXPECT_EQ(seen.size(), 12u);
}

TEST(CodecRoundTripTest, ExtremeNumbers) {
  Result r{.job_id = "j",
           .reason = EndReason::kError,
           .exit_code = std::numeric_limits<int32_t>::min(),
           .signal = std::numeric_limits<int32_t>::max(),
           .duration_ms = 0,
           .cpu_ms = 1e300,
           .max_rss_kb = std::numeric_limits<uint64_t>::max(),
           .redactions = std::numeric_limits<uint32_t>::max(),
           .session_epoch = std::numeric_limits<uint64_t>::max()};
  StatusOr<Message> back = Decode(Encode(r));
  ASSERT_TRUE(IsOk(back));
  EXPECT_EQ(*back, Message{r});
}

TEST(CodecLayoutTest, FrameIsVersionTypeBody) {
  for (const Message& m : FullMessages()) {
    Value f = FrameOf(m);
    ASSERT_EQ(f.kind, Value::Kind::kArray);
    ASSERT_EQ(f.items.size(), 3u);
    EXPECT_EQ(f.items[0].kind, Value::Kind::kUint);
    EXPECT_EQ(f.items[0].u, kProtocolVersion);
    EXPECT_EQ(f.items[1].kind, Value::Kind::kUint);
    EXPECT_EQ(f.items[1].u, static_cast<uint64_t>(TypeOf(m)));
    ASSERT_EQ(f.items[2].kind, Value::Kind::kMap);
    for (const auto& [k, v] : f.items[2].entries) EXPECT_EQ(k.kind, Value::Kind::kStr);
  }
}

TEST(CodecLayoutTest, BytesAreBinTextIsStrEnumsAreUints) {
  Value ex = FrameOf(Full(MessageType::kExecute));
  EXPECT_EQ(At(ex, {"code"}).kind, Value::Kind::kBin);
  EXPECT_EQ(At(ex, {"files", "0", "content"}).kind, Value::Kind::kBin);
  EXPECT_EQ(At(ex, {"files", "0", "path"}).kind, Value::Kind::kStr);
  EXPECT_EQ(At(ex, {"job_id"}).kind, Value::Kind::kStr);
  EXPECT_EQ(At(ex, {"language"}).kind, Value::Kind::kStr);
  EXPECT_EQ(At(ex, {"input_json"}).kind, Value::Kind::kStr);
  EXPECT_EQ(At(ex, {"env"}).kind, Value::Kind::kMap);
  EXPECT_EQ(At(ex, {"limits"}).kind, Value::Kind::kMap);
  EXPECT_EQ(At(ex, {"limits", "timeout_ms"}).u, 30000u);
  EXPECT_EQ(At(ex, {"stream_output"}).kind, Value::Kind::kBool);

  Value chunk = FrameOf(Full(MessageType::kOutputChunk));
  EXPECT_EQ(At(chunk, {"data"}).kind, Value::Kind::kBin);
  EXPECT_EQ(At(chunk, {"stream"}).kind, Value::Kind::kUint);
  EXPECT_EQ(At(chunk, {"stream"}).u, 2u);

  Value res = FrameOf(Full(MessageType::kResult));
  EXPECT_EQ(At(res, {"stdout_data"}).kind, Value::Kind::kBin);
  EXPECT_EQ(At(res, {"stderr_data"}).kind, Value::Kind::kBin);
  EXPECT_EQ(At(res, {"result_json"}).kind, Value::Kind::kStr);
  EXPECT_EQ(At(res, {"reason"}).u, 6u);
  EXPECT_EQ(At(res, {"exit_code"}).kind, Value::Kind::kInt);
  EXPECT_EQ(At(res, {"exit_code"}).i, -1);
  EXPECT_EQ(At(res, {"error", "type"}).s, "ZeroDivisionError");
  EXPECT_EQ(At(res, {"duration_ms"}).kind, Value::Kind::kFloat64);
}

TEST(CodecLayoutTest, EmptyOptionalsAreAbsent) {
  Value f = FrameOf(Result{.job_id = "j"});
  Value& body = f.items[2];
  EXPECT_EQ(Lookup(body, "exit_code"), nullptr);
  EXPECT_EQ(Lookup(body, "signal"), nullptr);
  EXPECT_EQ(Lookup(body, "error"), nullptr);
  EXPECT_NE(Lookup(body, "job_id"), nullptr);
  EXPECT_NE(Lookup(body, "stdout_data"), nullptr);
}

TEST(CodecDecodeTest, StrAndBinAreInterchangeable) {
  StatusOr<Message> a = DecodeWith(MessageType::kExecute, {"code"}, Str("print(1)"));
  ASSERT_TRUE(IsOk(a));
  EXPECT_EQ(std::get<Execute>(*a).code, "print(1)");
  StatusOr<Message> b = DecodeWith(MessageType::kExecute, {"language"}, Bin("shell"));
  ASSERT_TRUE(IsOk(b));
  EXPECT_EQ(std::get<Execute>(*b).language, "shell");

  Value frame = FrameOf(Full(MessageType::kCancel));
  frame.items[2].entries[0].key = Bin("job_id");  // a bin key
  StatusOr<Message> c = DecodeValue(frame);
  ASSERT_TRUE(IsOk(c));
  EXPECT_EQ(*c, Full(MessageType::kCancel));
}

TEST(CodecDecodeTest, UnknownKeysAreIgnoredAtEveryLevel) {
  for (const Message& m : FullMessages()) {
    SCOPED_TRACE(TypeName(TypeOf(m)));
    Value frame = FrameOf(m);
    Set(frame, {"zz_future_field"},
        Map({{Str("nested"), Arr({U(kProtocolVersion), Str("x"), Nil(), F64(2)})}}));
    Set(frame, {"zz_future_number"}, I(-5));
    StatusOr<Message> back = DecodeValue(frame);
    ASSERT_TRUE(IsOk(back));
    EXPECT_EQ(*back, m);
  }
  Value frame = FrameOf(Full(MessageType::kExecute));
  Set(frame, {"limits", "max_threads"}, U(4));
  Set(frame, {"files", "0", "mode"}, U(0755));
  StatusOr<Message> back = DecodeValue(frame);
  ASSERT_TRUE(IsOk(back));
  EXPECT_EQ(*back, Full(MessageType::kExecute));
}

TEST(CodecDecodeTest, NilMeansAbsentForOptionalsOnly) {
  StatusOr<Message> a = DecodeWith(MessageType::kResult, {"exit_code"}, Nil());
  ASSERT_TRUE(IsOk(a));
  EXPECT_FALSE(std::get<Result>(*a).exit_code.has_value());
  StatusOr<Message> b = DecodeWith(MessageType::kResult, {"error"}, Nil());
  ASSERT_TRUE(IsOk(b));
  EXPECT_FALSE(std::get<Result>(*b).error.has_value());
  EXPECT_TRUE(IsInvalid(DecodeWith(MessageType::kResult, {"job_id"}, Nil()),
                        "result.job_id: expected str or bin, got nil"));
  EXPECT_TRUE(IsInvalid(DecodeWith(MessageType::kHeartbeat, {"running"}, Nil()),
                        "heartbeat.running: expected unsigned integer, got nil"));
}

TEST(CodecDecodeTest, NumbersForDoublesMayBeIntegersOrFloat32) {
  StatusOr<Message> a = DecodeWith(MessageType::kResult, {"duration_ms"}, U(12));
  ASSERT_TRUE(IsOk(a));
  EXPECT_EQ(std::get<Result>(*a).duration_ms, 12.0);
  StatusOr<Message> b = DecodeWith(MessageType::kResult, {"cpu_ms"}, F32(1.5f));
  ASSERT_TRUE(IsOk(b));
  EXPECT_EQ(std::get<Result>(*b).cpu_ms, 1.5);
}

// ---------------------------------------------------------------------------
// Truncation and corruption

TEST(CodecRobustnessTest, EveryTruncationIsRejected) {
  std::vector<Message> all = FullMessages();
  for (Message& m : MinimalMessages()) all.push_back(std::move(m));
  for (const Message& m : all) {
    const std::string frame = Encode(m);
    SCOPED_TRACE(TypeName(TypeOf(m)));
    ASSERT_TRUE(IsOk(Decode(frame)));
    EXPECT_TRUE(IsInvalid(Decode(std::string_view(frame.data(), 0)), "empty frame"));
    for (size_t n = 1; n < frame.size(); ++n) {
      EXPECT_TRUE(IsInvalid(Decode(std::string_view(frame.data(), n)), "truncated frame"))
          << "prefix of " << n << " of " << frame.size() << " bytes";
    }
  }
}

TEST(CodecRobustnessTest, RandomCorruptionNeverCrashes) {
  const std::vector<Message> samples = FullMessages();
  std::vector<std::string> frames;
  for (const Message& m : samples) frames.push_back(Encode(m));
  for (const Message& m : MinimalMessages()) frames.push_back(Encode(m));

  std::mt19937 rng(20240521);
  const char kInteresting[] = {'\x00', '\x7f', '\x80', '\x90', '\xc0', '\xc1', '\xc2', '\xc4',
                               '\xd0', '\xdc', '\xdd', '\xde', '\xdf', '\xdb', '\xff', '\x01'};
  int decoded = 0;
  int rejected = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string f = frames[rng() % frames.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !f.empty(); ++e) {
      const size_t pos = rng() % f.size();
      switch (rng() % 5) {
        case 0:
          f[pos] = static_cast<char>(f[pos] ^ (1u << (rng() % 8)));
          break;
        case 1:
          f[pos] = kInteresting[rng() % sizeof(kInteresting)];
          break;
        case 2:
          f[pos] = static_cast<char>(rng());
          break;
        case 3:
          f.insert(pos, 1, static_cast<char>(rng()));
          break;
        default:
          f.erase(pos, 1 + rng() % 4);
          break;
      }
    }
    StatusOr<Message> r = Decode(f);
    if (!r.ok()) {
      ++rejected;
      ASSERT_EQ(r.status().code(), Code::kInvalidRequest) << r.status().ToString();
      ASSERT_FALSE(r.status().message().empty());
      continue;
    }
    ++decoded;
    // Whatever decodes must survive a round trip unchanged.
    StatusOr<Message> again = Decode(Encode(*r));
    ASSERT_TRUE(IsOk(again));
    ASSERT_EQ(*again, *r);
  }
  // Both outcomes happen: byte-string contents absorb corruption, headers do not.
  EXPECT_GT(decoded, 100);
  EXPECT_GT(rejected, 1000);
}

TEST(CodecRobustnessTest, TrailingBytesAreRejected) {
  const std::string frame = Encode(Full(MessageType::kHeartbeat));
  EXPECT_TRUE(
      IsInvalid(Decode(frame + std::string(1, '\0')), "1 trailing bytes after the message"));
  EXPECT_TRUE(IsInvalid(Decode(frame + frame),
                        std::to_string(frame.size()) + " trailing bytes after the message"));
}

// ---------------------------------------------------------------------------
// Envelope

TEST(CodecEnvelopeTest, WrongVersion) {
  Value frame = FrameOf(Full(MessageType::kHeartbeat));
  frame.items[0] = U(1);  // before result_ack
  EXPECT_TRUE(IsInvalid(DecodeValue(frame), "unsupported protocol version 1"));
  frame.items[0] = U(0);
  EXPECT_TRUE(IsInvalid(DecodeValue(frame), "unsupported protocol version 0"));
  frame.items[0] = U(1ull << 40);
  EXPECT_TRUE(IsInvalid(DecodeValue(frame), "unsupported protocol version 1099511627776"));
  frame.items[0] = I(-1);
  EXPECT_TRUE(IsInvalid(DecodeValue(frame),
                        "protocol version must be an unsigned integer, got negative integer"));
  frame.items[0] = Str("1");
  EXPECT_TRUE(
      IsInvalid(DecodeValue(frame), "protocol version must be an unsigned integer, got str"));
  // A future version may change the envelope; the version is still reported.
  EXPECT_TRUE(IsInvalid(DecodeValue(Arr({U(3), U(1)})), "unsupported protocol version 3"));
  EXPECT_TRUE(IsInvalid(DecodeValue(Arr({U(7)})), "unsupported protocol version 7"));
}

TEST(CodecEnvelopeTest, UnknownType) {
  for (uint64_t t : {0ull, 13ull, 255ull, 1ull << 40}) {
    Value frame = FrameOf(Full(MessageType::kCancel));
    frame.items[1] = U(t);
    EXPECT_TRUE(IsInvalid(DecodeValue(frame), "unknown message type " + std::to_string(t)));
  }
  Value frame = FrameOf(Full(MessageType::kCancel));
  frame.items[1] = I(-7);
  EXPECT_TRUE(IsInvalid(DecodeValue(frame),
                        "message type must be an unsigned integer, got negative integer"));
  frame.items[1] = Str("cancel");
  EXPECT_TRUE(IsInvalid(DecodeValue(frame), "message type must be an unsigned integer, got str"));
}

TEST(CodecEnvelopeTest, WrongTopLevelShapes) {
  const Value body = FrameOf(Full(MessageType::kCancel)).items[2];
  EXPECT_TRUE(IsInvalid(DecodeValue(body), "frame must be a MessagePack array"));
  EXPECT_TRUE(IsInvalid(DecodeValue(U(1)), "frame must be a MessagePack array"));
  EXPECT_TRUE(IsInvalid(DecodeValue(Str("hello")),
                        "frame must be a MessagePack array [version, type, body], got str"));
  EXPECT_TRUE(IsInvalid(DecodeValue(Nil()),
                        "frame must be a MessagePack array [version, type, body], got nil"));
  EXPECT_TRUE(IsInvalid(DecodeValue(Arr({})), "frame is an empty array"));
  EXPECT_TRUE(
      IsInvalid(DecodeValue(Arr({U(kProtocolVersion), U(7)})), "frame has 2 elements, expected 3"));
  EXPECT_TRUE(IsInvalid(DecodeValue(Arr({U(kProtocolVersion), U(7), body, U(0)})),
                        "frame has 4 elements, expected 3"));
  EXPECT_TRUE(
      IsInvalid(DecodeValue(Arr({U(kProtocolVersion), U(7), Arr({Str("job_id"), Str("x")})})),
                "cancel: expected map, got array"));
  EXPECT_TRUE(IsInvalid(DecodeValue(Arr({U(kProtocolVersion), U(7), Str("job_id")})),
                        "cancel: expected map, got str"));
  EXPECT_TRUE(IsInvalid(DecodeValue(Arr({U(kProtocolVersion), U(7), Nil()})),
                        "cancel: expected map, got nil"));
  // Sanity: the same body in the right place decodes.
  EXPECT_TRUE(IsOk(DecodeValue(Arr({U(kProtocolVersion), U(7), body}))));
}

TEST(CodecEnvelopeTest, NonStringKeys) {
  Value frame = FrameOf(Full(MessageType::kCancel));
  frame.items[2].entries.push_back({U(1), Str("x")});
  EXPECT_TRUE(
      IsInvalid(DecodeValue(frame), "cancel: map keys must be strings, got unsigned integer"));

  Value nested = FrameOf(Full(MessageType::kExecute));
  At(nested, {"limits"}).entries.push_back({Nil(), U(1)});
  EXPECT_TRUE(IsInvalid(DecodeValue(nested), "execute.limits: map keys must be strings, got nil"));

  Value file = FrameOf(Full(MessageType::kExecute));
  At(file, {"files", "1"}).entries.push_back({Arr({}), U(1)});
  EXPECT_TRUE(
      IsInvalid(DecodeValue(file), "execute.files[1]: map keys must be strings, got array"));
}

TEST(CodecEnvelopeTest, DuplicateKeys) {
  Value frame = FrameOf(Full(MessageType::kExecute));
  frame.items[2].entries.push_back({Str("job_id"), Str("other")});
  EXPECT_TRUE(IsInvalid(DecodeValue(frame), "execute.job_id: duplicate key"));

  Value env = FrameOf(Full(MessageType::kExecute));
  At(env, {"env"}).entries.push_back({Str("LANG"), Str("C")});
  EXPECT_TRUE(IsInvalid(DecodeValue(env), "execute.env[3]: duplicate name"));
}

// ---------------------------------------------------------------------------
// Required and optional fields

struct FieldCase {
  MessageType type;
  std::vector<std::string> path;
  std::string name;  // as errors print it
};

const std::vector<FieldCase>& RequiredFields() {
  static const std::vector<FieldCase> cases = {
      {MessageType::kRegister, {"worker_id"}, "register.worker_id"},
      {MessageType::kRegister, {"runtimes"}, "register.runtimes"},
      {MessageType::kRegister, {"slots"}, "register.slots"},
      {MessageType::kRegisterAck, {"broker_id"}, "register_ack.broker_id"},
      {MessageType::kRegisterAck, {"heartbeat_interval_ms"}, "register_ack.heartbeat_interval_ms"},
      {MessageType::kRegisterAck, {"heartbeat_liveness"}, "register_ack.heartbeat_liveness"},
      {MessageType::kHeartbeat, {"sender_id"}, "heartbeat.sender_id"},
      {MessageType::kExecute, {"job_id"}, "execute.job_id"},
      {MessageType::kExecute, {"tenant"}, "execute.tenant"},
      {MessageType::kExecute, {"language"}, "execute.language"},
      {MessageType::kExecute, {"code"}, "execute.code"},
      {MessageType::kExecute, {"limits"}, "execute.limits"},
      {MessageType::kExecute, {"limits", "timeout_ms"}, "execute.limits.timeout_ms"},
      {MessageType::kExecute, {"limits", "memory_mb"}, "execute.limits.memory_mb"},
      {MessageType::kExecute, {"limits", "cpu_ms"}, "execute.limits.cpu_ms"},
      {MessageType::kExecute, {"limits", "max_output_bytes"}, "execute.limits.max_output_bytes"},
      {MessageType::kExecute, {"limits", "max_pids"}, "execute.limits.max_pids"},
      {MessageType::kExecute, {"files", "1", "path"}, "execute.files[1].path"},
      {MessageType::kExecute, {"files", "0", "content"}, "execute.files[0].content"},
      {MessageType::kOutputChunk, {"job_id"}, "output_chunk.job_id"},
      {MessageType::kOutputChunk, {"stream"}, "output_chunk.stream"},
      {MessageType::kOutputChunk, {"seq"}, "output_chunk.seq"},
      {MessageType::kOutputChunk, {"data"}, "output_chunk.data"},
      {MessageType::kResult, {"job_id"}, "result.job_id"},
      {MessageType::kResult, {"reason"}, "result.reason"},
      {MessageType::kResult, {"files", "0", "path"}, "result.files[0].path"},
      {MessageType::kResult, {"files", "0", "content"}, "result.files[0].content"},
      {MessageType::kCancel, {"job_id"}, "cancel.job_id"},
  };
  return cases;
}

TEST(CodecFieldsTest, MissingRequiredFieldIsRejected) {
  for (const FieldCase& c : RequiredFields()) {
    SCOPED_TRACE(c.name);
    Value frame = FrameOf(Full(c.type));
    Erase(frame, c.path);
    EXPECT_TRUE(IsInvalid(DecodeValue(frame), c.name + ": required field is missing"));
  }
}

TEST(CodecFieldsTest, MissingOptionalFieldTakesItsDefault) {
  const std::vector<FieldCase> optional = {
      {MessageType::kRegister, {"hostname"}, ""},
      {MessageType::kRegister, {"sandbox_layers"}, ""},
      {MessageType::kRegister, {"metrics_endpoint"}, ""},
      {MessageType::kRegister, {"heartbeat_interval_ms"}, ""},
      {MessageType::kHeartbeat, {"running"}, ""},
      {MessageType::kHeartbeat, {"free_slots"}, ""},
      {MessageType::kHeartbeat, {"draining"}, ""},
      {MessageType::kExecute, {"session_id"}, ""},
      {MessageType::kExecute, {"input_json"}, ""},
      {MessageType::kExecute, {"env"}, ""},
      {MessageType::kExecute, {"files"}, ""},
      {MessageType::kExecute, {"collect"}, ""},
      {MessageType::kExecute, {"stream_output"}, ""},
      {MessageType::kExecute, {"session_epoch"}, ""},
      {MessageType::kExecute, {"session_ttl_ms"}, ""},
      {MessageType::kResult, {"exit_code"}, ""},
      {MessageType::kResult, {"signal"}, ""},
      {MessageType::kResult, {"stdout_data"}, ""},
      {MessageType::kResult, {"stderr_data"}, ""},
      {MessageType::kResult, {"truncated"}, ""},
      {MessageType::kResult, {"result_json"}, ""},
      {MessageType::kResult, {"error"}, ""},
      {MessageType::kResult, {"error", "type"}, ""},
      {MessageType::kResult, {"error", "message"}, ""},
      {MessageType::kResult, {"error", "traceback"}, ""},
      {MessageType::kResult, {"duration_ms"}, ""},
      {MessageType::kResult, {"cpu_ms"}, ""},
      {MessageType::kResult, {"max_rss_kb"}, ""},
      {MessageType::kResult, {"files"}, ""},
      {MessageType::kResult, {"files_truncated"}, ""},
      {MessageType::kResult, {"files_omitted"}, ""},
      {MessageType::kResult, {"redactions"}, ""},
      {MessageType::kResult, {"session_epoch"}, ""},
      {MessageType::kResult, {"session_reset"}, ""},
      {MessageType::kResult, {"worker_error"}, ""},
      {MessageType::kDisconnect, {"reason"}, ""},
  };
  for (const FieldCase& c : optional) {
    SCOPED_TRACE(Join(c.path));
    Value frame = FrameOf(Full(c.type));
    Erase(frame, c.path);
    StatusOr<Message> r = DecodeValue(frame);
    ASSERT_TRUE(IsOk(r));
    // Every field of the full samples differs from its default, so dropping
    // one must change the decoded message.
    EXPECT_NE(*r, Full(c.type));
    EXPECT_EQ(TypeOf(*r), c.type);
  }
}

TEST(CodecFieldsTest, MissingOptionalFieldsDecodeToStructDefaults) {
  StatusOr<Message> r =
      DecodeValue(Arr({U(2), U(6), Map({{Str("job_id"), Str("j")}, {Str("reason"), U(2)}})}));
  ASSERT_TRUE(IsOk(r));
  EXPECT_EQ(*r, (Message{Result{.job_id = "j", .reason = EndReason::kTimeout}}));
  StatusOr<Message> h =
      DecodeValue(Arr({U(kProtocolVersion), U(3), Map({{Str("sender_id"), Str("b")}})}));
  ASSERT_TRUE(IsOk(h));
  EXPECT_EQ(*h, Message{Heartbeat{.sender_id = "b"}});
  StatusOr<Message> d = DecodeValue(Arr({U(kProtocolVersion), U(8), Map({})}));
  ASSERT_TRUE(IsOk(d));
  EXPECT_EQ(*d, Message{Disconnect{}});
}

TEST(CodecFieldsTest, EmptyIdsAreRejected) {
  const std::vector<FieldCase> ids = {
      {MessageType::kRegister, {"worker_id"}, "register.worker_id"},
      {MessageType::kRegisterAck, {"broker_id"}, "register_ack.broker_id"},
      {MessageType::kHeartbeat, {"sender_id"}, "heartbeat.sender_id"},
      {MessageType::kExecute, {"job_id"}, "execute.job_id"},
      {MessageType::kOutputChunk, {"job_id"}, "output_chunk.job_id"},
      {MessageType::kResult, {"job_id"}, "result.job_id"},
      {MessageType::kCancel, {"job_id"}, "cancel.job_id"},
  };
  for (const FieldCase& c : ids) {
    EXPECT_TRUE(IsInvalid(DecodeWith(c.type, c.path, Str("")), c.name + ": must not be empty"));
  }
  // session_id is not an id that must be set: empty means a one-shot job.
  EXPECT_TRUE(IsOk(DecodeWith(MessageType::kExecute, {"session_id"}, Str(""))));
}

// ---------------------------------------------------------------------------
// Wrongly typed values

struct TypeCase {
  MessageType type;
  std::vector<std::string> path;
  Value value;
  std::string error;
};

TEST(CodecFieldsTest, WronglyTypedValuesAreRejected) {
  const std::vector<TypeCase> cases = {
      {MessageType::kExecute,
       {"job_id"},
       U(5),
       "execute.job_id: expected str or bin, got unsigned integer"},
      {MessageType::kExecute, {"code"}, Arr({}), "execute.code: expected str or bin, got array"},
      {MessageType::kRegister,
       {"slots"},
       Str("8"),
       "register.slots: expected unsigned integer, got str"},
      {MessageType::kRegister,
       {"slots"},
       F64(8),
       "register.slots: expected unsigned integer, got float64"},
      {MessageType::kRegister,
       {"slots"},
       Bool(true),
       "register.slots: expected unsigned integer, got bool"},
      {MessageType::kRegister,
       {"runtimes"},
       Str("python"),
       "register.runtimes: expected array, got str"},
      {MessageType::kRegister,
       {"runtimes", "1"},
       U(1),
       "register.runtimes[1]: expected str or bin, got unsigned integer"},
      {MessageType::kHeartbeat,
       {"draining"},
       U(1),
       "heartbeat.draining: expected bool, got unsigned integer"},
      {MessageType::kExecute, {"env"}, Arr({}), "execute.env: expected map, got array"},
      {MessageType::kExecute,
       {"env", "LANG"},
       U(1),
       "execute.env[1]: value: expected str or bin, got unsigned integer"},
      {MessageType::kExecute, {"files"}, Map({}), "execute.files: expected array, got map"},
      {MessageType::kExecute,
       {"files", "0"},
       Str("a.txt"),
       "execute.files[0]: expected map, got str"},
      {MessageType::kExecute,
       {"files", "1", "content"},
       U(0),
       "execute.files[1].content: expected str or bin"},
      {MessageType::kExecute, {"limits"}, Arr({}), "execute.limits: expected map, got array"},
      {MessageType::kExecute,
       {"limits", "memory_mb"},
       Str("256"),
       "execute.limits.memory_mb: expected unsigned integer, got str"},
      {MessageType::kExecute,
       {"stream_output"},
       Str("true"),
       "execute.stream_output: expected bool, got str"},
      {MessageType::kExecute, {"collect"}, Map({}), "execute.collect: expected array, got map"},
      {MessageType::kOutputChunk,
       {"stream"},
       Str("stdout"),
       "output_chunk.stream: expected unsigned integer, got str"},
      {MessageType::kOutputChunk,
       {"seq"},
       F32(1),
       "output_chunk.seq: expected unsigned integer, got float32"},
      {MessageType::kResult,
       {"exit_code"},
       Str("0"),
       "result.exit_code: expected integer, got str"},
      {MessageType::kResult, {"signal"}, F64(9), "result.signal: expected integer, got float64"},
      {MessageType::kResult,
       {"duration_ms"},
       Str("1.0"),
       "result.duration_ms: expected number, got str"},
      {MessageType::kResult, {"truncated"}, Nil(), "result.truncated: expected bool, got nil"},
      {MessageType::kResult, {"error"}, Str("boom"), "result.error: expected map, got str"},
      {MessageType::kResult,
       {"error", "message"},
       U(3),
       "result.error.message: expected str or bin"},
      {MessageType::kResult,
       {"files", "0", "path"},
       Bool(false),
       "result.files[0].path: expected str or bin, got bool"},
      {MessageType::kDisconnect,
       {"reason"},
       Map({}),
       "disconnect.reason: expected str or bin, got map"},
  };
  for (const TypeCase& c : cases) {
    SCOPED_TRACE(c.error);
    Value frame = FrameOf(Full(c.type));
    At(frame, c.path) = c.value;
    EXPECT_TRUE(IsInvalid(DecodeValue(frame), c.error));
  }
}

TEST(CodecFieldsTest, NegativeNumbersWhereUnsignedAreExpected) {
  EXPECT_TRUE(IsInvalid(DecodeWith(MessageType::kRegister, {"slots"}, I(-1)),
                        "register.slots: expected unsigned integer, got negative -1"));
  EXPECT_TRUE(IsInvalid(DecodeWith(MessageType::kOutputChunk, {"seq"}, I(-5)),
                        "output_chunk.seq: expected unsigned integer, got negative -5"));
  EXPECT_TRUE(
      IsInvalid(DecodeWith(MessageType::kExecute, {"limits", "timeout_ms"}, I(-1000)),
                "execute.limits.timeout_ms: expected unsigned integer, got negative -1000"));
  EXPECT_TRUE(IsInvalid(DecodeWith(MessageType::kResult, {"reason"}, I(-1)),
                        "result.reason: expected unsigned integer, got negative -1"));
  EXPECT_TRUE(IsInvalid(DecodeWith(MessageType::kResult, {"duration_ms"}, F64(-0.5)),
                        "result.duration_ms: expected a finite number >= 0"));
  EXPECT_TRUE(IsInvalid(DecodeWith(MessageType::kResult, {"cpu_ms"}, I(-3)),
                        "result.cpu_ms: expected a finite number >= 0"));
  EXPECT_TRUE(IsInvalid(DecodeWith(MessageType::kResult, {"cpu_ms"}, F64(std::nan(""))),
                        "result.cpu_ms: expected a finite number >= 0"));
  EXPECT_TRUE(IsInvalid(DecodeWith(MessageType::kResult, {"duration_ms"},
                                   F64(std::numeric_limits<double>::infinity())),
                        "result.duration_ms: expected a finite number >= 0"));
}

TEST(CodecFieldsTest, IntegerRanges) {
  const uint64_t u32max = std::numeric_limits<uint32_t>::max();
  EXPECT_TRUE(IsOk(DecodeWith(MessageType::kRegister, {"slots"}, U(u32max))));
  EXPECT_TRUE(IsInvalid(DecodeWith(MessageType::kRegister, {"slots"}, U(u32max + 1)),
                        "register.slots: 4294967296 exceeds the maximum 4294967295"));
  EXPECT_TRUE(IsInvalid(DecodeWith(MessageType::kResult, {"redactions"}, U(u32max + 1)),
                        "result.redactions: 4294967296 exceeds the maximum 4294967295"));
  EXPECT_TRUE(IsOk(
      DecodeWith(MessageType::kResult, {"max_rss_kb"}, U(std::numeric_limits<uint64_t>::max()))));

  const int64_t i32min = std::numeric_limits<int32_t>::min();
  const int64_t i32max = std::numeric_limits<int32_t>::max();
  StatusOr<Message> lo = DecodeWith(MessageType::kResult, {"exit_code"}, I(i32min));
  ASSERT_TRUE(IsOk(lo));
  EXPECT_EQ(std::get<Result>(*lo).exit_code, std::optional<int32_t>(i32min));
  StatusOr<Message> hi = DecodeWith(MessageType::kResult, {"signal"}, U(i32max));
  ASSERT_TRUE(IsOk(hi));
  EXPECT_EQ(std::get<Result>(*hi).signal, std::optional<int32_t>(i32max));
  EXPECT_TRUE(IsInvalid(DecodeWith(MessageType::kResult, {"exit_code"}, I(i32min - 1)),
                        "result.exit_code: -2147483649 is outside the int32 range"));
  EXPECT_TRUE(IsInvalid(DecodeWith(MessageType::kResult, {"signal"}, U(i32max + 1)),
                        "result.signal: 2147483648 is outside the int32 range"));
}

TEST(CodecFieldsTest, EnumValuesOutOfRange) {
  for (uint64_t s : {1u, 2u}) {
    StatusOr<Message> r = DecodeWith(MessageType::kOutputChunk, {"stream"}, U(s));
    ASSERT_TRUE(IsOk(r));
    EXPECT_EQ(static_cast<uint64_t>(std::get<OutputChunk>(*r).stream), s);
  }
  EXPECT_TRUE(IsInvalid(DecodeWith(MessageType::kOutputChunk, {"stream"}, U(0)),
                        "output_chunk.stream: 0 is not a valid value (1..2)"));
  EXPECT_TRUE(IsInvalid(DecodeWith(MessageType::kOutputChunk, {"stream"}, U(3)),
                        "output_chunk.stream: 3 is not a valid value (1..2)"));
  for (uint64_t reason = 1; reason <= 9; ++reason) {
    StatusOr<Message> r = DecodeWith(MessageType::kResult, {"reason"}, U(reason));
    ASSERT_TRUE(IsOk(r));
    EXPECT_EQ(static_cast<uint64_t>(std::get<Result>(*r).reason), reason);
  }
  EXPECT_TRUE(IsInvalid(DecodeWith(MessageType::kResult, {"reason"}, U(0)),
                        "result.reason: 0 is not a valid value (1..9)"));
  EXPECT_TRUE(IsInvalid(DecodeWith(MessageType::kResult, {"reason"}, U(10)),
                        "result.reason: 10 is not a valid value (1..9)"));
  EXPECT_TRUE(IsInvalid(DecodeWith(MessageType::kResult, {"reason"}, U(256 + 1)),
                        "result.reason: 257 is not a valid value (1..9)"));
}

// ---------------------------------------------------------------------------
// Limits

struct SizeCase {
  MessageType type;
  std::vector<std::string> path;
  size_t limit;
  std::string name;
};

std::string TooBig(size_t limit) {
  return std::to_string(limit + 1) + " bytes exceeds the limit of " + std::to_string(limit);
}

TEST(CodecLimitsTest, EveryFieldSizeLimit) {
  const std::vector<SizeCase> cases = {
      {MessageType::kRegister, {"worker_id"}, kMaxIdBytes, "register.worker_id"},
      {MessageType::kRegister, {"hostname"}, kMaxStringBytes, "register.hostname"},
      {MessageType::kRegister, {"runtimes", "0"}, kMaxStringBytes, "register.runtimes[0]"},
      {MessageType::kRegister,
       {"sandbox_layers", "3"},
       kMaxStringBytes,
       "register.sandbox_layers[3]"},
      {MessageType::kRegister, {"metrics_endpoint"}, kMaxStringBytes, "register.metrics_endpoint"},
      {MessageType::kRegisterAck, {"broker_id"}, kMaxIdBytes, "register_ack.broker_id"},
      {MessageType::kHeartbeat, {"sender_id"}, kMaxIdBytes, "heartbeat.sender_id"},
      {MessageType::kExecute, {"job_id"}, kMaxIdBytes, "execute.job_id"},
      {MessageType::kExecute, {"tenant"}, kMaxStringBytes, "execute.tenant"},
      {MessageType::kExecute, {"language"}, kMaxStringBytes, "execute.language"},
      {MessageType::kExecute, {"code"}, kMaxCodeBytes, "execute.code"},
      {MessageType::kExecute, {"session_id"}, kMaxSessionKeyBytes, "execute.session_id"},
      {MessageType::kExecute, {"input_json"}, kMaxInputJsonBytes, "execute.input_json"},
      {MessageType::kExecute, {"env", "LANG"}, kMaxStringBytes, "execute.env[1]: value"},
      {MessageType::kExecute, {"files", "1", "path"}, kMaxStringBytes, "execute.files[1].path"},
      {MessageType::kExecute, {"collect", "1"}, kMaxStringBytes, "execute.collect[1]"},
      {MessageType::kOutputChunk, {"job_id"}, kMaxIdBytes, "output_chunk.job_id"},
      {MessageType::kOutputChunk, {"data"}, kMaxChunkBytes, "output_chunk.data"},
      {MessageType::kResult, {"job_id"}, kMaxIdBytes, "result.job_id"},
      {MessageType::kResult, {"stdout_data"}, kMaxStreamBytes, "result.stdout_data"},
      {MessageType::kResult, {"stderr_data"}, kMaxStreamBytes, "result.stderr_data"},
      {MessageType::kResult, {"result_json"}, kMaxResultJsonBytes, "result.result_json"},
      {MessageType::kResult, {"error", "type"}, kMaxStringBytes, "result.error.type"},
      {MessageType::kResult, {"error", "message"}, kMaxStringBytes, "result.error.message"},
      {MessageType::kResult, {"error", "traceback"}, kMaxStringBytes, "result.error.traceback"},
      {MessageType::kResult, {"files", "0", "path"}, kMaxStringBytes, "result.files[0].path"},
      {MessageType::kResult, {"worker_error"}, kMaxStringBytes, "result.worker_error"},
      {MessageType::kCancel, {"job_id"}, kMaxIdBytes, "cancel.job_id"},
      {MessageType::kDisconnect, {"reason"}, kMaxStringBytes, "disconnect.reason"},
      {MessageType::kCloseSession, {"session_id"}, kMaxSessionKeyBytes, "close_session.session_id"},
      {MessageType::kResultAck, {"job_id"}, kMaxIdBytes, "result_ack.job_id"},
      {MessageType::kRegister, {"incarnation"}, kMaxIdBytes, "register.incarnation"},
      {MessageType::kRegister, {"held_jobs", "1"}, kMaxIdBytes, "register.held_jobs[1]"},
      {MessageType::kRegister, {"isolation"}, kMaxIdBytes, "register.isolation"},
      {MessageType::kExecute, {"isolation"}, kMaxIdBytes, "execute.isolation"},
      {MessageType::kExecute, {"stdin_data"}, kMaxStdinBytes, "execute.stdin_data"},
      {MessageType::kExecute, {"packages", "1"}, kMaxPackageBytes, "execute.packages[1]"},
      {MessageType::kExecute,
       {"network_allow", "1"},
       kMaxDestinationBytes,
       "execute.network_allow[1]"},
      {MessageType::kResult, {"network_json"}, kMaxNetworkUsageBytes, "result.network_json"},
      {MessageType::kResult, {"outputs", "0", "mime"}, kMaxMimeBytes, "result.outputs[0].mime"},
      {MessageType::kExecute, {"tools", "1"}, kMaxToolNameBytes, "execute.tools[1]"},
      {MessageType::kToolCall, {"name"}, kMaxToolNameBytes, "tool_call.name"},
      {MessageType::kToolCall,
       {"arguments_json"},
       kMaxToolArgumentBytes,
       "tool_call.arguments_json"},
      {MessageType::kToolResult, {"result_json"}, kMaxToolResultBytes, "tool_result.result_json"},
      {MessageType::kToolResult,
       {"error_message"},
       kMaxToolErrorBytes,
       "tool_result.error_message"},
  };
  for (const SizeCase& c : cases) {
    SCOPED_TRACE(c.name);
    Value frame = FrameOf(Full(c.type));
    Value& field = At(frame, c.path);
    field.s.assign(c.limit, 'x');
    EXPECT_TRUE(IsOk(DecodeValue(frame)));
    field.s.push_back('x');
    EXPECT_TRUE(IsInvalid(DecodeValue(frame), c.name + ": " + TooBig(c.limit)));
  }
}

TEST(CodecLimitsTest, EnvNameLimit) {
  Value frame = FrameOf(Full(MessageType::kExecute));
  At(frame, {"env"}).entries[0].key = Str(std::string(kMaxStringBytes, 'N'));
  EXPECT_TRUE(IsOk(DecodeValue(frame)));
  At(frame, {"env"}).entries[0].key.s.push_back('N');
  EXPECT_TRUE(IsInvalid(DecodeValue(frame), "execute.env[0]: name: " + TooBig(kMaxStringBytes)));
}

struct CountCase {
  MessageType type;
  std::string key;
  size_t limit;
  Value entry;
};

TEST(CodecLimitsTest, EveryListLimit) {
  const Value file = Map({{Str("path"), Str("f")}, {Str("content"), Bin("c")}});
  const Value output = Map({{Str("mime"), Str("text/plain")}, {Str("data"), Bin("x")}});
  const std::vector<CountCase> cases = {
      {MessageType::kResult, "outputs", kMaxRichOutputs, output},
      {MessageType::kRegister, "runtimes", kMaxListEntries, Str("python")},
      {MessageType::kRegister, "sandbox_layers", kMaxListEntries, Str("seccomp")},
      {MessageType::kRegister, "held_jobs", kMaxHeldJobs, Str("ex_1")},
      {MessageType::kExecute, "collect", kMaxListEntries, Str("*.txt")},
      {MessageType::kExecute, "packages", kMaxRequestPackages, Str("numpy")},
      {MessageType::kExecute, "network_allow", kMaxNetworkDestinations, Str("a.io:1")},
      {MessageType::kExecute, "files", kMaxFiles, file},
      {MessageType::kResult, "files", kMaxFiles, file},
  };
  for (const CountCase& c : cases) {
    SCOPED_TRACE(c.key);
    Value frame = FrameOf(Full(c.type));
    Value& list = At(frame, {c.key});
    list.items.assign(c.limit, c.entry);
    EXPECT_TRUE(IsOk(DecodeValue(frame)));
    list.items.push_back(c.entry);
    EXPECT_TRUE(IsInvalid(DecodeValue(frame), std::string(TypeName(c.type)) + "." + c.key + ": " +
                                                  std::to_string(c.limit + 1) +
                                                  " entries exceeds the limit of " +
                                                  std::to_string(c.limit)));
  }
}

TEST(CodecLimitsTest, EnvEntryLimit) {
  Value frame = FrameOf(Full(MessageType::kExecute));
  Value& env = At(frame, {"env"});
  env.entries.clear();
  for (size_t i = 0; i < kMaxEnvEntries; ++i) {
    env.entries.push_back({Str("V" + std::to_string(i)), Str("x")});
  }
  StatusOr<Message> ok = DecodeValue(frame);
  ASSERT_TRUE(IsOk(ok));
  EXPECT_EQ(std::get<Execute>(*ok).env.size(), kMaxEnvEntries);
  env.entries.push_back({Str("ONE_MORE"), Str("x")});
  EXPECT_TRUE(IsInvalid(DecodeValue(frame), "execute.env: 257 entries exceeds the limit of 256"));
}

TEST(CodecLimitsTest, TotalOutputBytes) {
  Result res = std::get<Result>(Full(MessageType::kResult));
  res.outputs = {{.mime = "image/png", .data = std::string(kMaxRichOutputBytes - 1, 'a')},
                 {.mime = "text/plain", .data = "b"}};
  StatusOr<Message> ok = Decode(Encode(res));
  ASSERT_TRUE(IsOk(ok));
  EXPECT_EQ(std::get<Result>(*ok).outputs, res.outputs);
  res.outputs[1].data = "bb";
  EXPECT_TRUE(IsInvalid(Decode(Encode(res)), "result.outputs: contents total 4194305 bytes"));
  res.outputs = {{.mime = "text/plain"}};
  EXPECT_TRUE(IsOk(Decode(Encode(res))));  // empty data is data
}

TEST(CodecLimitsTest, TotalFileBytes) {
  Execute ex = std::get<Execute>(Full(MessageType::kExecute));
  ex.files = {{.path = "a", .content = std::string(kMaxFilesBytes / 2, 'a')},
              {.path = "b", .content = std::string(kMaxFilesBytes / 2, 'b')}};
  EXPECT_TRUE(IsOk(Decode(Encode(ex))));
  ex.files[1].content.push_back('b');
  EXPECT_TRUE(
      IsInvalid(Decode(Encode(ex)),
                "execute.files: contents total 33554433 bytes, exceeding the limit of 33554432"));

  Result res = std::get<Result>(Full(MessageType::kResult));
  res.stdout_data.clear();
  res.files = {{.path = "a", .content = std::string(kMaxFilesBytes - 1, 'a')},
               {.path = "b", .content = "bb"}};
  EXPECT_TRUE(IsInvalid(Decode(Encode(res)), "result.files: contents total 33554433 bytes"));

  // One file alone over the total is refused by the frame scan, before any copy.
  res.files = {{.path = "a", .content = std::string(kMaxFilesBytes + 1, 'a')}};
  EXPECT_TRUE(
      IsInvalid(Decode(Encode(res)), "bin of 33554433 bytes exceeds the limit of 33554432"));
}

TEST(CodecLimitsTest, FrameSize) {
  // Exactly at the frame limit decodes: a Result whose fields are all within
  // their own limits but add up to kMaxMessageBytes.
  Result r{.job_id = "j",
           .stdout_data = std::string(kMaxStreamBytes, 'o'),
           .stderr_data = std::string(kMaxStreamBytes, 'e'),
           .files = {{.path = "a", .content = std::string(kMaxFilesBytes / 2, 'a')}}};
  const size_t base = Encode(r).size();
  ASSERT_LT(base, kMaxMessageBytes);
  r.files.push_back({.path = "b", .content = std::string(kMaxMessageBytes - base - 100, 'b')});
  const size_t with_b = Encode(r).size();
  ASSERT_LE(with_b, kMaxMessageBytes);
  r.files[1].content.append(kMaxMessageBytes - with_b, 'b');
  std::string frame = Encode(r);
  ASSERT_EQ(frame.size(), kMaxMessageBytes);
  StatusOr<Message> at_limit = Decode(frame);
  ASSERT_TRUE(IsOk(at_limit));
  EXPECT_EQ(*at_limit, Message{r});

  r.files[1].content.push_back('b');
  frame = Encode(r);
  ASSERT_EQ(frame.size(), kMaxMessageBytes + 1);
  EXPECT_TRUE(IsInvalid(Decode(frame), "frame of 67108865 bytes exceeds the limit of 67108864"));
  // Checked before parsing: garbage of that size gets the same answer.
  EXPECT_TRUE(IsInvalid(Decode(std::string(kMaxMessageBytes + 1, '\xc1')),
                        "frame of 67108865 bytes exceeds the limit"));
}

// ---------------------------------------------------------------------------
// Hostile MessagePack

std::string Bytes(std::initializer_list<uint8_t> b) { return std::string(b.begin(), b.end()); }

TEST(CodecHostileTest, HugeContainerHeadersWithTinyInput) {
  EXPECT_TRUE(IsInvalid(Decode(Bytes({0xdd, 0xff, 0xff, 0xff, 0xff})),
                        "array of 4294967295 entries exceeds the limit of 1024"));
  EXPECT_TRUE(IsInvalid(Decode(Bytes({0xdf, 0xff, 0xff, 0xff, 0xff})),
                        "map of 4294967295 entries exceeds the limit of 1024"));
  EXPECT_TRUE(IsInvalid(Decode(Bytes({0xdc, 0xff, 0xff})),
                        "array of 65535 entries exceeds the limit of 1024"));
  // Inside an otherwise valid frame.
  Value frame = FrameOf(Full(MessageType::kCancel));
  Set(frame, {"job_id"}, Raw(Bytes({0xdd, 0x7f, 0xff, 0xff, 0xff})));
  EXPECT_TRUE(
      IsInvalid(DecodeValue(frame), "array of 2147483647 entries exceeds the limit of 1024"));
  Set(frame, {"job_id"}, Raw(Bytes({0xdf, 0x00, 0x01, 0x00, 0x00})));
  EXPECT_TRUE(IsInvalid(DecodeValue(frame), "map of 65536 entries exceeds the limit of 1024"));
}

TEST(CodecHostileTest, HugeStringHeadersWithTinyInput) {
  // Strings are only read once all their bytes are there, so these are truncated frames.
  EXPECT_TRUE(IsInvalid(Decode(Bytes({0xdb, 0xff, 0xff, 0xff, 0xff, 'a'})), "truncated frame"));
  EXPECT_TRUE(IsInvalid(Decode(Bytes({0xc6, 0xff, 0xff, 0xff, 0xff, 'a'})), "truncated frame"));
  EXPECT_TRUE(IsInvalid(Decode(Bytes({0xc9, 0xff, 0xff, 0xff, 0xff, 0x01})), "truncated frame"));
  Value frame = FrameOf(Full(MessageType::kExecute));
  Set(frame, {"code"}, Raw(Bytes({0xc6, 0xff, 0xff, 0xff, 0xff})));
  EXPECT_TRUE(IsInvalid(DecodeValue(frame), "truncated frame"));
}

TEST(CodecHostileTest, ContainerEntryLimitInUnknownKeys) {
  Value frame = FrameOf(Full(MessageType::kHeartbeat));
  Set(frame, {"padding"}, Arr(std::vector<Value>(1024, Nil())));
  EXPECT_TRUE(IsOk(DecodeValue(frame)));
  At(frame, {"padding"}).items.push_back(Nil());
  EXPECT_TRUE(IsInvalid(DecodeValue(frame), "array of 1025 entries exceeds the limit of 1024"));
}

TEST(CodecHostileTest, TotalValueLimit) {
  // 63 arrays of 1024 fit (with the rest of the frame) under 65536 values; 64 do not.
  Value frame = FrameOf(Full(MessageType::kHeartbeat));
  for (int i = 0; i < 63; ++i) {
    Set(frame, {"pad" + std::to_string(i)}, Arr(std::vector<Value>(1024, Nil())));
  }
  EXPECT_TRUE(IsOk(DecodeValue(frame)));
  Set(frame, {"pad63"}, Arr(std::vector<Value>(1024, Nil())));
  EXPECT_TRUE(IsInvalid(DecodeValue(frame), "more than 65536 values in one frame"));
}

TEST(CodecHostileTest, DeepNesting) {
  // Frame array (1) > body map (2) > six more arrays = depth 8: allowed.
  auto nested = [](int depth) {
    Value v = Arr({});
    for (int i = 1; i < depth; ++i) v = Arr({std::move(v)});
    return v;
  };
  Value frame = FrameOf(Full(MessageType::kHeartbeat));
  Set(frame, {"deep"}, nested(6));
  EXPECT_TRUE(IsOk(DecodeValue(frame)));
  Set(frame, {"deep"}, nested(7));
  EXPECT_TRUE(IsInvalid(DecodeValue(frame), "nesting deeper than 8 levels"));

  // A hundred thousand nested one-element arrays: no stack overflow, no allocation storm.
  EXPECT_TRUE(IsInvalid(Decode(std::string(100000, '\x91')), "nesting deeper than 8 levels"));
  EXPECT_TRUE(IsInvalid(Decode(std::string(100000, '\x81')), "nesting deeper than 8 levels"));
}

TEST(CodecHostileTest, ReservedByteAndExt) {
  EXPECT_TRUE(IsInvalid(Decode(Bytes({0x93, 0x01, 0x07, 0xc1})), "malformed MessagePack at byte"));
  // An ext value is not any field's type.
  Value frame = FrameOf(Full(MessageType::kCancel));
  Set(frame, {"job_id"}, Raw(Bytes({0xd4, 0x01, 0x00})));
  EXPECT_TRUE(IsInvalid(DecodeValue(frame), "cancel.job_id: expected str or bin, got ext"));
  // ...but is ignored under an unknown key.
  Set(frame, {"job_id"}, Str("j"));
  Set(frame, {"future"}, Raw(Bytes({0xd4, 0x01, 0x00})));
  EXPECT_TRUE(IsOk(DecodeValue(frame)));
}

}  // namespace
}  // namespace kiln::common::protocol
