// Tests of the native client codec (common/protocol/client_codec.hpp): round
// trips of every message, the frame layout, and rejection of bad frames
// (hand-packed with msgpack, each differing from a valid one in the way the
// test names).

#include "common/protocol/client_codec.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <msgpack.hpp>
#include <random>
#include <string>
#include <vector>

#include "common/protocol/codec.hpp"

namespace kiln::common::protocol::client {
namespace {

using ::testing::HasSubstr;

std::vector<Message> Samples() {
  return {
      Submit{1, "tok-en-12", R"j({"language":"python","code":"print(1)"})j", "key-1", true},
      Submit{2, "t", "{}", "", false},
      Subscribe{3, "tok", "ex_1"},
      Subscribe{4, "tok", "ex_1", 17},  // a resume
      Cancel{UINT64_MAX, "tok", "ex_2"},
      Get{0, "tok", "ex_3"},
      Accepted{5, "ex_4", "queued"},
      Output{6, "ex_5", Stream::kStderr, 42, std::string("a\0b\xff", 4)},
      Result{7, "ex_6", R"({"id":"ex_6","status":"succeeded"})"},
      Error{8, "UNAUTHORIZED", "unknown token", false, ""},
      Error{9, "QUEUE_FULL", "later", true, "ex_7"},
      ToolAnswer{10, "tok", "ex_8", "c3", R"({"hits":[1,2]})"},
      ToolAnswer{11, "tok", "ex_8", "c4", "", true, "not found"},
      ToolCall{12, "ex_8", "c5", "search", R"({"q":"kiln"})"},
      ToolAnswered{13, "ex_8", "c3"},
  };
}

TEST(ClientCodec, EveryMessageRoundTrips) {
  for (const Message& m : Samples()) {
    auto back = Decode(Encode(m));
    ASSERT_TRUE(back.ok()) << TypeName(TypeOf(m)) << ": " << back.status().ToString();
    EXPECT_EQ(*back, m) << TypeName(TypeOf(m));
    EXPECT_EQ(RequestIdOf(*back), RequestIdOf(m));
  }
}

// [version, type, {key: value}] with string keys, as docs/protocol.md says.
TEST(ClientCodec, FrameLayout) {
  const std::string frame = Encode(Get{77, "tok", "ex_9"});
  msgpack::object_handle h = msgpack::unpack(frame.data(), frame.size());
  const msgpack::object& o = h.get();
  ASSERT_EQ(o.type, msgpack::type::ARRAY);
  ASSERT_EQ(o.via.array.size, 3u);
  EXPECT_EQ(o.via.array.ptr[0].as<uint32_t>(), kClientProtocolVersion);
  EXPECT_EQ(o.via.array.ptr[1].as<uint32_t>(), 4u);
  auto body = o.via.array.ptr[2].as<std::map<std::string, msgpack::object>>();
  EXPECT_EQ(body.size(), 3u);
  EXPECT_EQ(body.at("request_id").as<uint64_t>(), 77u);
  EXPECT_EQ(body.at("token").as<std::string>(), "tok");
  EXPECT_EQ(body.at("id").as<std::string>(), "ex_9");
  // Output data is bin.
  const std::string out = Encode(Output{1, "ex", Stream::kStdout, 0, "hi"});
  h = msgpack::unpack(out.data(), out.size());
  body = h.get().via.array.ptr[2].as<std::map<std::string, msgpack::object>>();
  EXPECT_EQ(body.at("data").type, msgpack::type::BIN);
  EXPECT_EQ(body.at("stream").as<int>(), 1);
}

// A frame [version, type, body] with the body's entries packed as given.
using Packer = msgpack::packer<msgpack::sbuffer>;
template <typename F>
std::string Frame(uint64_t version, uint64_t type, uint32_t entries, F body) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_array(3);
  pk.pack_uint64(version);
  pk.pack_uint64(type);
  pk.pack_map(entries);
  body(pk);
  return std::string(buf.data(), buf.size());
}

void KV(Packer& pk, const std::string& k, const std::string& v) {
  pk.pack(k);
  pk.pack(v);
}

std::string DecodeError(std::string_view frame) {
  auto m = Decode(frame);
  EXPECT_FALSE(m.ok());
  if (m.ok()) return "";
  EXPECT_EQ(m.status().code(), Code::kInvalidRequest);
  return m.status().message();
}

TEST(ClientCodec, UnknownKeysAreIgnored) {
  auto m = Decode(Frame(1, 4, 4, [](Packer& pk) {
    pk.pack("request_id");
    pk.pack(9);
    KV(pk, "token", "tok");
    KV(pk, "id", "ex_1");
    pk.pack("future");
    pk.pack_array(2);
    pk.pack(1);
    pk.pack_nil();
  }));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(*m, Message(Get{9, "tok", "ex_1"}));
}

TEST(ClientCodec, RejectsBadBodies) {
  EXPECT_THAT(DecodeError(Frame(1, 4, 2,
                                [](Packer& pk) {
                                  pk.pack("request_id");
                                  pk.pack(9);
                                  KV(pk, "token", "tok");
                                })),
              HasSubstr("get.id: required field is missing"));
  EXPECT_THAT(DecodeError(Frame(1, 4, 3,
                                [](Packer& pk) {
                                  pk.pack("request_id");
                                  pk.pack(-1);
                                  KV(pk, "token", "tok");
                                  KV(pk, "id", "x");
                                })),
              HasSubstr("get.request_id: expected unsigned integer, got negative -1"));
  EXPECT_THAT(DecodeError(Frame(1, 2, 3,
                                [](Packer& pk) {
                                  pk.pack("request_id");
                                  pk.pack(1);
                                  pk.pack("token");
                                  pk.pack(5);
                                  KV(pk, "id", "x");
                                })),
              HasSubstr("subscribe.token: expected str or bin, got unsigned integer"));
  EXPECT_THAT(DecodeError(Frame(1, 3, 4,
                                [](Packer& pk) {
                                  pk.pack("request_id");
                                  pk.pack(1);
                                  KV(pk, "token", "a");
                                  KV(pk, "id", "x");
                                  KV(pk, "id", "y");
                                })),
              HasSubstr("cancel.id: duplicate key"));
  EXPECT_THAT(DecodeError(Frame(1, 4, 3,
                                [](Packer& pk) {
                                  pk.pack("request_id");
                                  pk.pack(1);
                                  KV(pk, "token", "a");
                                  KV(pk, "id", std::string(kMaxIdBytes + 1, 'x'));
                                })),
              HasSubstr("get.id: 129 bytes exceeds the limit of 128"));
  EXPECT_THAT(DecodeError(Frame(1, 4, 3,
                                [](Packer& pk) {
                                  pk.pack("request_id");
                                  pk.pack(1);
                                  KV(pk, "token", "a");
                                  KV(pk, "id", "");
                                })),
              HasSubstr("get.id: must not be empty"));
  EXPECT_THAT(DecodeError(Frame(1, 1, 3,
                                [](Packer& pk) {
                                  pk.pack("request_id");
                                  pk.pack(1);
                                  KV(pk, "token", std::string(kMaxTokenBytes + 1, 't'));
                                  KV(pk, "request_json", "{}");
                                })),
              HasSubstr("submit.token: 65537 bytes exceeds the limit of 65536"));
  EXPECT_THAT(DecodeError(Frame(1, 1, 4,
                                [](Packer& pk) {
                                  pk.pack("request_id");
                                  pk.pack(1);
                                  KV(pk, "token", "t");
                                  KV(pk, "request_json", "{}");
                                  KV(pk, "idempotency_key", std::string(129, 'k'));
                                })),
              HasSubstr("submit.idempotency_key: 129 bytes exceeds the limit of 128"));
  EXPECT_THAT(DecodeError(Frame(1, 1, 4,
                                [](Packer& pk) {
                                  pk.pack("request_id");
                                  pk.pack(1);
                                  KV(pk, "token", "t");
                                  KV(pk, "request_json", "{}");
                                  pk.pack("subscribe");
                                  pk.pack(1);
                                })),
              HasSubstr("submit.subscribe: expected bool"));
  EXPECT_THAT(DecodeError(Frame(1, 12, 5,
                                [](Packer& pk) {
                                  pk.pack("request_id");
                                  pk.pack(1);
                                  KV(pk, "id", "x");
                                  pk.pack("stream");
                                  pk.pack(3);
                                  pk.pack("seq");
                                  pk.pack(0);
                                  KV(pk, "data", "");
                                })),
              HasSubstr("output.stream: 3 is not a valid value"));
  // Map keys must be strings.
  EXPECT_THAT(DecodeError(Frame(1, 4, 1,
                                [](Packer& pk) {
                                  pk.pack(1);
                                  pk.pack(2);
                                })),
              HasSubstr("map keys must be strings"));
}

TEST(ClientCodec, RejectsBadEnvelopes) {
  EXPECT_THAT(DecodeError(Frame(2, 4, 0, [](Packer&) {})),
              HasSubstr("unsupported client protocol version 2"));
  EXPECT_THAT(DecodeError(Frame(1, 99, 0, [](Packer&) {})), HasSubstr("unknown message type 99"));
  EXPECT_THAT(DecodeError(""), HasSubstr("empty frame"));
  EXPECT_THAT(DecodeError("\xc1"), HasSubstr("malformed"));
  EXPECT_THAT(DecodeError("\x93\x01"), HasSubstr("truncated"));
  const std::string good = Encode(Get{1, "t", "x"});
  EXPECT_THAT(DecodeError(good + "\x01"), HasSubstr("1 trailing bytes"));
  EXPECT_THAT(DecodeError("\xdd\xff\xff\xff\xff"), HasSubstr("exceeds the limit"));
  // A worker-protocol frame is not a client request (the worker protocol is
  // at version 2).
  EXPECT_THAT(DecodeError(protocol::Encode(protocol::Message{protocol::Cancel{"ex_1"}})),
              HasSubstr("unsupported client protocol version 2"));
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_map(0);
  EXPECT_THAT(DecodeError(std::string(buf.data(), buf.size())),
              HasSubstr("must be a MessagePack array"));
}

TEST(ClientCodec, EveryTruncationIsRejected) {
  for (const Message& m : Samples()) {
    const std::string frame = Encode(m);
    for (size_t n = 0; n < frame.size(); ++n) {
      auto r = Decode(std::string_view(frame).substr(0, n));
      EXPECT_FALSE(r.ok()) << TypeName(TypeOf(m)) << " cut at " << n;
    }
  }
}

// Random corruption never crashes, and whatever decodes re-encodes.
TEST(ClientCodec, CorruptedFramesNeverCrash) {
  std::mt19937 rng(12345);
  for (const Message& m : Samples()) {
    const std::string frame = Encode(m);
    for (int round = 0; round < 2000; ++round) {
      std::string bad = frame;
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int f = 0; f < flips; ++f) bad[rng() % bad.size()] = static_cast<char>(rng());
      auto r = Decode(bad);
      if (r.ok()) {
        EXPECT_TRUE(Decode(Encode(*r)).ok());
      }
      (void)PeekRequestId(bad);
    }
  }
}

TEST(ClientCodec, PeekRequestIdReadsWhatItCan) {
  // A get without its id does not decode, but its request_id is readable.
  const std::string frame = Frame(1, 4, 2, [](Packer& pk) {
    pk.pack("request_id");
    pk.pack(4242);
    KV(pk, "token", "tok");
  });
  EXPECT_FALSE(Decode(frame).ok());
  EXPECT_EQ(PeekRequestId(frame), 4242u);
  EXPECT_EQ(PeekRequestId(Encode(Subscribe{17, "t", "x"})), 17u);
  EXPECT_EQ(PeekRequestId("garbage"), 0u);
  EXPECT_EQ(PeekRequestId(Frame(2, 4, 1,
                                [](Packer& pk) {
                                  pk.pack("request_id");
                                  pk.pack(5);
                                })),
            0u);  // another version: its layout is unknown
}

}  // namespace
}  // namespace kiln::common::protocol::client
