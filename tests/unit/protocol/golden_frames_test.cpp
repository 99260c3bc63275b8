// Golden bytes of both MessagePack protocols (codec.hpp, client_codec.hpp):
// the exact frames a few representative messages encode to, digests of every
// sample message's frame, and the exact verdict on each kind of bad frame.
// Any change to the wire format or to a decoder's errors shows up here, so a
// refactor of the codecs is provably wire-identical. A deliberate protocol
// change updates these values (and docs/protocol.md) in the same commit.

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <msgpack.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/audit/sha256.hpp"
#include "common/protocol/client_codec.hpp"
#include "common/protocol/codec.hpp"
#include "tests/unit/protocol/sample_messages.hpp"

namespace kiln::common::protocol {
namespace {

std::string Hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  for (unsigned char c : bytes) {
    s += kDigits[c >> 4];
    s += kDigits[c & 15];
  }
  return s;
}

// ---------------------------------------------------------------------------
// Encoding

TEST(GoldenFramesTest, WorkerFrames) {
  EXPECT_EQ(Hex(Encode(Cancel{.job_id = "ex_1"})), "93020781a66a6f625f6964a465785f31");
  EXPECT_EQ(Hex(Encode(Heartbeat{
                .sender_id = "w-1", .running = 3, .free_slots = 70000, .draining = true})),
            "93020384a973656e6465725f6964a3772d31a772756e6e696e6703aa667265655f736c6f7473ce00011170"
            "a8647261696e696e67c3");
  EXPECT_EQ(Hex(Encode(OutputChunk{.job_id = "j",
                                   .stream = Stream::kStderr,
                                   .seq = 1ull << 40,
                                   .offset = 300,
                                   .data = std::string("a\0\xff", 3)})),
            "93020585a66a6f625f6964a16aa673747265616d02a3736571cf0000010000000000a66f6666736574cd01"
            "2ca464617461c4036100ff");
  // Doubles always float64, negative ints, a nested struct, a list of structs.
  EXPECT_EQ(
      Hex(Encode(Result{.job_id = "j",
                        .reason = EndReason::kTimeout,
                        .exit_code = -3,
                        .error = ErrorInfo{.type = "E"},
                        .duration_ms = 2.0,
                        .cpu_ms = 1.5,
                        .files = {{.path = "p", .content = "c"}},
                        .session_reset = true})),
      "930206de0016a66a6f625f6964a16aa6726561736f6e02a9657869745f636f6465fdab7374646f75745f64617461"
      "c400ab7374646572725f64617461c400a97472756e6361746564c2ab726573756c745f6a736f6ea0a56572726f72"
      "83a474797065a145a76d657373616765a0a974726163656261636ba0ab6475726174696f6e5f6d73cb4000000000"
      "000000a66370755f6d73cb3ff8000000000000aa6d61785f7273735f6b6200a566696c65739182a470617468a170"
      "a7636f6e74656e74c40163af66696c65735f7472756e6361746564c2ad66696c65735f6f6d697474656400a76f75"
      "747075747390b16f7574707574735f7472756e6361746564c2aa726564616374696f6e7300ad73657373696f6e5f"
      "65706f636800ad73657373696f6e5f7265736574c3ac776f726b65725f6572726f72a0b1776f726b65725f657272"
      "6f725f636f6465a0ac6e6574776f726b5f6a736f6ea0");
  EXPECT_EQ(
      Hex(Encode(Execute{.job_id = "j",
                         .tenant = "t",
                         .language = "python",
                         .code = "1",
                         .env = {{"B", "2"}, {"A", "1"}},
                         .collect = {"x"},
                         .limits = samples::FullLimits()})),
      "930204de0016a66a6f625f6964a16aa674656e616e74a174a86c616e6775616765a6707974686f6ea4636f6465c4"
      "0131aa73657373696f6e5f6964a0ad73657373696f6e5f65706f636800ae73657373696f6e5f74746c5f6d7300aa"
      "696e7075745f6a736f6ea0a3656e7682a141a131a142a132a566696c657390a7636f6c6c65637491a178a66c696d"
      "69747385aa74696d656f75745f6d73cd7530a96d656d6f72795f6d62cd0100a66370755f6d73cd4e20b06d61785f"
      "6f75747075745f6279746573ce00100000a86d61785f7069647340ad73747265616d5f6f7574707574c2a7736563"
      "7265747390a969736f6c6174696f6ea0aa737464696e5f64617461c400a87061636b6167657390ad6e6574776f72"
      "6b5f616c6c6f7790b16e6574776f726b5f6d61785f627974657300b76e6574776f726b5f6d61785f636f6e6e6563"
      "74696f6e7300a5746f6f6c7390af746f6f6c5f74696d656f75745f6d7300");
}

// Every field of every worker message, and the minimal forms.
TEST(GoldenFramesTest, WorkerSampleDigests) {
  Sha256 full;
  for (const Message& m : samples::FullMessages()) full.Update(Encode(m));
  EXPECT_EQ(full.FinishHex(), "e10b3f0d049bb5117b853c5a47d5150dab17fe01cc9a1d34cdf18f1b58f18577");
  Sha256 minimal;
  for (const Message& m : samples::MinimalMessages()) minimal.Update(Encode(m));
  EXPECT_EQ(minimal.FinishHex(),
            "fcccaa6e2873e1784413bc37dfce0efb10c820ef19e5523d5574189177f4b716");
}

TEST(GoldenFramesTest, ClientFrames) {
  using namespace client;  // NOLINT: the client's message names
  EXPECT_EQ(Hex(client::Encode(Submit{1, "tok", R"({"code":"1"})", "key", true})),
            "93010185aa726571756573745f696401a5746f6b656ea3746f6bac726571756573745f6a736f6eac7b2263"
            "6f6465223a2231227daf6964656d706f74656e63795f6b6579a36b6579a9737562736372696265c3");
  EXPECT_EQ(Hex(client::Encode(Submit{2, "t", "{}", "", false})),
            "93010185aa726571756573745f696402a5746f6b656ea174ac726571756573745f6a736f6ea27b7daf6964"
            "656d706f74656e63795f6b6579a0a9737562736372696265c2");
  EXPECT_EQ(Hex(client::Encode(Subscribe{UINT64_MAX, "tok", "ex_1", 17})),
            "93010284aa726571756573745f6964cfffffffffffffffffa5746f6b656ea3746f6ba26964a465785f31a8"
            "66726f6d5f73657111");
  EXPECT_EQ(Hex(client::Encode(client::Cancel{3, "tok", "ex_2"})),
            "93010383aa726571756573745f696403a5746f6b656ea3746f6ba26964a465785f32");
  EXPECT_EQ(Hex(client::Encode(Get{0, "tok", "ex_3"})),
            "93010483aa726571756573745f696400a5746f6b656ea3746f6ba26964a465785f33");
  EXPECT_EQ(Hex(client::Encode(Accepted{5, "ex_4", "queued"})),
            "93010b83aa726571756573745f696405a26964a465785f34a6737461747573a6717565756564");
  EXPECT_EQ(Hex(client::Encode(Output{6, "ex_5", Stream::kStderr, 42, std::string("a\0\xff", 3)})),
            "93010c85aa726571756573745f696406a26964a465785f35a673747265616d02a37365712aa464617461c4"
            "036100ff");
  EXPECT_EQ(Hex(client::Encode(client::Result{7, "ex_6", R"({"id":"ex_6"})"})),
            "93010d83aa726571756573745f696407a26964a465785f36ab7265636f72645f6a736f6ead7b226964223a"
            "2265785f36227d");
  EXPECT_EQ(Hex(client::Encode(Error{9, "QUEUE_FULL", "later", true, "ex_7"})),
            "93010e85aa726571756573745f696409a4636f6465aa51554555455f46554c4ca76d657373616765a56c61"
            "746572a9726574727961626c65c3a26964a465785f37");
}

// ---------------------------------------------------------------------------
// Decoding: the exact verdict on bad frames, built with msgpack's packer so
// the inputs do not depend on the encoder under test.

using Packer = msgpack::packer<msgpack::sbuffer>;

std::string Build(const std::function<void(Packer&)>& fill) {
  msgpack::sbuffer buffer;
  Packer pk(buffer);
  fill(pk);
  return std::string(buffer.data(), buffer.size());
}

void Str(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

// [version, type, body] with `body` packing the body (any value).
std::string Frame(uint64_t version, uint64_t type, const std::function<void(Packer&)>& body) {
  return Build([&](Packer& pk) {
    pk.pack_array(3);
    pk.pack_uint64(version);
    pk.pack_uint64(type);
    body(pk);
  });
}

// A map of string keys; `values` packs the value of key i.
std::function<void(Packer&)> Map(std::vector<std::string> keys,
                                 std::function<void(Packer&, size_t)> values) {
  return [keys = std::move(keys), values = std::move(values)](Packer& pk) {
    pk.pack_map(static_cast<uint32_t>(keys.size()));
    for (size_t i = 0; i < keys.size(); ++i) {
      Str(pk, keys[i]);
      values(pk, i);
    }
  };
}

// Inputs that both decoders must reject, whatever the message set.
std::vector<std::pair<std::string, std::string>> EnvelopeCases(uint64_t version) {
  return {
      {"empty", ""},
      {"reserved byte", "\xc1"},
      {"truncated", "\x93"},
      {"truncated body", "\x93\x01\x07\x81"},
      {"nil", "\xc0"},
      {"empty array", "\x90"},
      {"trailing", Frame(version, 7, Map({}, nullptr)) + "x"},
      {"next version", Frame(version + 1, 7, Map({}, nullptr))},
      {"two elements", Build([&](Packer& pk) {
         pk.pack_array(2);
         pk.pack_uint64(version);
         pk.pack_uint64(7);
       })},
      {"str type", Build([&](Packer& pk) {
         pk.pack_array(3);
         pk.pack_uint64(version);
         Str(pk, "x");
         pk.pack_map(0);
       })},
      {"unknown type", Frame(version, 99, Map({}, nullptr))},
      {"deep nesting", Frame(version, 3,
                             [](Packer& pk) {
                               for (int i = 0; i < 9; ++i) pk.pack_array(1);
                               pk.pack_nil();
                             })},
      {"huge array header", "\x93\x01\x03\xdd\xff\xff\xff\xff"},
      {"huge str header", "\x93\x01\x03\xdb\xff\xff\xff\xff"},
  };
}

// The error, or "ok" and a digest of the decoded message's frame.
// What each decoder says about each case below, one line per case.
constexpr std::string_view kWorkerVerdicts = R"golden(empty: INVALID_REQUEST: empty frame
reserved byte: INVALID_REQUEST: malformed MessagePack at byte 0
truncated: INVALID_REQUEST: truncated frame: the message is incomplete
truncated body: INVALID_REQUEST: truncated frame: the message is incomplete
nil: INVALID_REQUEST: frame must be a MessagePack array [version, type, body], got nil
empty array: INVALID_REQUEST: frame is an empty array, expected [version, type, body]
trailing: INVALID_REQUEST: 1 trailing bytes after the message
next version: INVALID_REQUEST: unsupported protocol version 3 (this side speaks 2)
two elements: INVALID_REQUEST: frame has 2 elements, expected 3 [version, type, body]
str type: INVALID_REQUEST: message type must be an unsigned integer, got str
unknown type: INVALID_REQUEST: unknown message type 99
deep nesting: INVALID_REQUEST: nesting deeper than 8 levels
huge array header: INVALID_REQUEST: array of 4294967295 entries exceeds the limit of 1024
huge str header: INVALID_REQUEST: truncated frame: the message is incomplete
body array: INVALID_REQUEST: cancel: expected map, got array
int key: INVALID_REQUEST: cancel: map keys must be strings, got unsigned integer
missing: INVALID_REQUEST: cancel.job_id: required field is missing
empty id: INVALID_REQUEST: cancel.job_id: must not be empty
duplicate: INVALID_REQUEST: cancel.job_id: duplicate key
wrong type: INVALID_REQUEST: cancel.job_id: expected str or bin, got unsigned integer
negative: INVALID_REQUEST: heartbeat.running: expected unsigned integer, got negative -1
uint32 range: INVALID_REQUEST: heartbeat.running: 4294967296 exceeds the maximum 4294967295
bool: INVALID_REQUEST: heartbeat.draining: expected bool, got unsigned integer
enum: INVALID_REQUEST: output_chunk.stream: 3 is not a valid value (1..2)
int32 range: INVALID_REQUEST: result.exit_code: 2147483648 is outside the int32 range
int32 low: INVALID_REQUEST: result.signal: -2147483649 is outside the int32 range
int nil: ok b2a626c419706f6d
negative double: INVALID_REQUEST: result.duration_ms: expected a finite number >= 0
double type: INVALID_REQUEST: result.cpu_ms: expected number, got str
int double: ok 139fbba0133c4862
float32: ok 5d9bac49e413e400
nested: INVALID_REQUEST: result.error.type: expected str or bin, got unsigned integer
nested nil: ok b2a626c419706f6d
file: INVALID_REQUEST: result.files[1].content: required field is missing
files type: INVALID_REQUEST: result.files: expected array, got map
str limit: INVALID_REQUEST: result.worker_error: 65537 bytes exceeds the limit of 65536
env: INVALID_REQUEST: execute.env[1]: value: expected str or bin, got unsigned integer
env names: INVALID_REQUEST: execute.env[1]: duplicate name
list entry: INVALID_REQUEST: execute.collect[1]: expected str or bin, got bool
list size: INVALID_REQUEST: execute.secrets: 257 entries exceeds the limit of 64
limits type: INVALID_REQUEST: execute.limits: expected map, got array
held jobs: INVALID_REQUEST: register.held_jobs[0]: 200 bytes exceeds the limit of 128
unknown keys: ok 7aabc55fedca1403
)golden";

constexpr std::string_view kClientVerdicts =
    R"golden(empty: INVALID_REQUEST: empty frame (request 0)
reserved byte: INVALID_REQUEST: malformed MessagePack at byte 0 (request 0)
truncated: INVALID_REQUEST: truncated frame: the message is incomplete (request 0)
truncated body: INVALID_REQUEST: truncated frame: the message is incomplete (request 0)
nil: INVALID_REQUEST: frame must be a MessagePack array [version, type, body], got nil (request 0)
empty array: INVALID_REQUEST: frame is an empty array, expected [version, type, body] (request 0)
trailing: INVALID_REQUEST: 1 trailing bytes after the message (request 0)
next version: INVALID_REQUEST: unsupported client protocol version 2 (this side speaks 1) (request 0)
two elements: INVALID_REQUEST: frame has 2 elements, expected 3 [version, type, body] (request 0)
str type: INVALID_REQUEST: message type must be an unsigned integer, got str (request 0)
unknown type: INVALID_REQUEST: unknown message type 99 (request 0)
deep nesting: INVALID_REQUEST: nesting deeper than 8 levels (request 0)
huge array header: INVALID_REQUEST: array of 4294967295 entries exceeds the limit of 1024 (request 0)
huge str header: INVALID_REQUEST: truncated frame: the message is incomplete (request 0)
body array: INVALID_REQUEST: get: expected map, got array (request 0)
int key: INVALID_REQUEST: get: map keys must be strings, got unsigned integer (request 0)
ok: ok ce93dcb160dd8d15 (request 5)
missing: INVALID_REQUEST: get.id: required field is missing (request 5)
empty id: INVALID_REQUEST: get.id: must not be empty (request 5)
duplicate: INVALID_REQUEST: get.token: duplicate key (request 5)
negative: INVALID_REQUEST: get.request_id: expected unsigned integer, got negative -2 (request 0)
uint type: INVALID_REQUEST: get.request_id: expected unsigned integer, got str (request 0)
text type: INVALID_REQUEST: get.token: expected str or bin, got unsigned integer (request 1)
token limit: INVALID_REQUEST: get.token: 65537 bytes exceeds the limit of 65536 (request 5)
key limit: INVALID_REQUEST: submit.idempotency_key: 129 bytes exceeds the limit of 128 (request 5)
bool: INVALID_REQUEST: submit.subscribe: expected bool, got unsigned integer (request 5)
stream: INVALID_REQUEST: output.stream: 0 is not a valid value (1..2) (request 1)
stream missing: INVALID_REQUEST: output.stream: required field is missing (request 1)
unknown keys: ok ce93dcb160dd8d15 (request 5)
)golden";

// The error, or "ok" and a digest of the decoded message's frame.
std::string Verdict(const StatusOr<Message>& r) {
  return r.ok() ? "ok " + Sha256Hex(Encode(*r)).substr(0, 16) : r.status().ToString();
}

std::string Verdict(const StatusOr<client::Message>& r) {
  return r.ok() ? "ok " + Sha256Hex(client::Encode(*r)).substr(0, 16) : r.status().ToString();
}

TEST(GoldenFramesTest, WorkerVerdicts) {
  auto cases = EnvelopeCases(kProtocolVersion);
  auto add = [&cases](std::string name, std::string frame) {
    cases.emplace_back(std::move(name), std::move(frame));
  };
  add("body array", Frame(kProtocolVersion, 7, [](Packer& pk) { pk.pack_array(0); }));
  add("int key", Frame(kProtocolVersion, 7, [](Packer& pk) {
        pk.pack_map(1);
        pk.pack_uint64(1);
        pk.pack_uint64(2);
      }));
  add("missing", Frame(kProtocolVersion, 7, Map({}, nullptr)));
  add("empty id",
      Frame(kProtocolVersion, 7, Map({"job_id"}, [](Packer& pk, size_t) { Str(pk, ""); })));
  add("duplicate", Frame(kProtocolVersion, 7,
                         Map({"job_id", "job_id"}, [](Packer& pk, size_t) { Str(pk, "a"); })));
  add("wrong type",
      Frame(kProtocolVersion, 7, Map({"job_id"}, [](Packer& pk, size_t) { pk.pack_uint64(5); })));
  add("negative",
      Frame(kProtocolVersion, 3, Map({"sender_id", "running"}, [](Packer& pk, size_t i) {
              if (i == 0) return Str(pk, "s");
              pk.pack_int64(-1);
            })));
  add("uint32 range",
      Frame(kProtocolVersion, 3, Map({"sender_id", "running"}, [](Packer& pk, size_t i) {
              if (i == 0) return Str(pk, "s");
              pk.pack_uint64(1ull << 32);
            })));
  add("bool", Frame(kProtocolVersion, 3, Map({"sender_id", "draining"}, [](Packer& pk, size_t i) {
                      if (i == 0) return Str(pk, "s");
                      pk.pack_uint64(1);
                    })));
  add("enum",
      Frame(kProtocolVersion, 5, Map({"job_id", "stream", "seq", "data"}, [](Packer& pk, size_t i) {
              if (i == 1) return pk.pack_uint64(3), void();
              if (i == 2) return pk.pack_uint64(0), void();
              Str(pk, "j");
            })));
  auto result = [](std::string key, std::function<void(Packer&)> value) {
    return Frame(kProtocolVersion, 6, Map({"job_id", "reason", key}, [value](Packer& pk, size_t i) {
                   if (i == 0) return Str(pk, "j");
                   if (i == 1) return pk.pack_uint64(1), void();
                   value(pk);
                 }));
  };
  add("int32 range", result("exit_code", [](Packer& pk) { pk.pack_uint64(1ull << 31); }));
  add("int32 low", result("signal", [](Packer& pk) { pk.pack_int64(-(1ll << 31) - 1); }));
  add("int nil", result("exit_code", [](Packer& pk) { pk.pack_nil(); }));
  add("negative double", result("duration_ms", [](Packer& pk) { pk.pack_double(-1.0); }));
  add("double type", result("cpu_ms", [](Packer& pk) { Str(pk, "1"); }));
  add("int double", result("cpu_ms", [](Packer& pk) { pk.pack_uint64(7); }));
  add("float32", result("cpu_ms", [](Packer& pk) { pk.pack_float(0.5f); }));
  add("nested", result("error", Map({"type"}, [](Packer& pk, size_t) { pk.pack_uint64(1); })));
  add("nested nil", result("error", [](Packer& pk) { pk.pack_nil(); }));
  add("file", result("files", [](Packer& pk) {
        pk.pack_array(2);
        Map({"path", "content"}, [](Packer& p, size_t) { Str(p, "a"); })(pk);
        Map({"path"}, [](Packer& p, size_t) { Str(p, "b"); })(pk);
      }));
  add("files type", result("files", [](Packer& pk) { pk.pack_map(0); }));
  add("str limit", result("worker_error", [](Packer& pk) { Str(pk, std::string(65537, 'x')); }));
  auto execute = [](std::string key, std::function<void(Packer&)> value) {
    return Frame(
        kProtocolVersion, 4,
        Map({"job_id", "tenant", "language", "code", "limits", key}, [value](Packer& pk, size_t i) {
          if (i == 4) {
            return Map({"timeout_ms", "memory_mb", "cpu_ms", "max_output_bytes", "max_pids"},
                       [](Packer& p, size_t) { p.pack_uint64(1); })(pk);
          }
          if (i == 5) return value(pk);
          Str(pk, "j");
        }));
  };
  add("env", execute("env", Map({"A", "B"}, [](Packer& pk, size_t i) {
                       if (i == 0) return Str(pk, "1");
                       pk.pack_uint64(2);
                     })));
  add("env names", execute("env", [](Packer& pk) {
        pk.pack_map(2);
        Str(pk, "A");
        Str(pk, "1");
        Str(pk, "A");
        Str(pk, "2");
      }));
  add("list entry", execute("collect", [](Packer& pk) {
        pk.pack_array(2);
        Str(pk, "a");
        pk.pack_true();
      }));
  add("list size", execute("secrets", [](Packer& pk) {
        pk.pack_array(257);
        for (int i = 0; i < 257; ++i) Str(pk, "s");
      }));
  add("limits type",
      Frame(kProtocolVersion, 4,
            Map({"job_id", "tenant", "language", "code", "limits"}, [](Packer& pk, size_t i) {
              if (i == 4) return pk.pack_array(0), void();
              Str(pk, "j");
            })));
  add("held jobs",
      Frame(kProtocolVersion, 1,
            Map({"worker_id", "runtimes", "slots", "held_jobs"}, [](Packer& pk, size_t i) {
              if (i == 0) return Str(pk, "w");
              if (i == 1) return pk.pack_array(0), void();
              if (i == 2) return pk.pack_uint64(1), void();
              pk.pack_array(1);
              Str(pk, std::string(200, 'j'));
            })));
  add("unknown keys", Frame(kProtocolVersion, 7, Map({"zzz", "job_id"}, [](Packer& pk, size_t i) {
                              if (i == 0) return pk.pack_array(0), void();
                              Str(pk, "a");
                            })));

  std::string got;
  for (const auto& [name, frame] : cases) got += name + ": " + Verdict(Decode(frame)) + "\n";
  EXPECT_EQ(got, kWorkerVerdicts);
}

TEST(GoldenFramesTest, ClientVerdicts) {
  auto cases = EnvelopeCases(client::kClientProtocolVersion);
  auto add = [&cases](std::string name, std::string frame) {
    cases.emplace_back(std::move(name), std::move(frame));
  };
  auto get = [](std::vector<std::string> keys, std::function<void(Packer&, size_t)> values) {
    return Frame(1, 4, Map(std::move(keys), std::move(values)));
  };
  auto text = [](Packer& pk, size_t i) {
    if (i == 0) return pk.pack_uint64(5), void();
    Str(pk, "t");
  };
  add("body array", Frame(1, 4, [](Packer& pk) { pk.pack_array(0); }));
  add("int key", Frame(1, 4, [](Packer& pk) {
        pk.pack_map(1);
        pk.pack_uint64(1);
        pk.pack_uint64(2);
      }));
  add("ok", get({"request_id", "token", "id"}, text));
  add("missing", get({"request_id", "token"}, text));
  add("empty id", get({"request_id", "token", "id"}, [](Packer& pk, size_t i) {
        if (i == 0) return pk.pack_uint64(5), void();
        Str(pk, i == 2 ? "" : "t");
      }));
  add("duplicate", get({"request_id", "token", "id", "token"}, text));
  add("negative", get({"request_id", "token", "id"}, [](Packer& pk, size_t i) {
        if (i == 0) return pk.pack_int64(-2), void();
        Str(pk, "t");
      }));
  add("uint type", get({"request_id", "token", "id"}, [](Packer& pk, size_t) { Str(pk, "t"); }));
  add("text type",
      get({"request_id", "token", "id"}, [](Packer& pk, size_t) { pk.pack_uint64(1); }));
  add("token limit", get({"request_id", "token", "id"}, [](Packer& pk, size_t i) {
        if (i == 0) return pk.pack_uint64(5), void();
        Str(pk, std::string(i == 1 ? 65537 : 1, 't'));
      }));
  add("key limit",
      Frame(1, 1,
            Map({"request_id", "token", "request_json", "idempotency_key", "subscribe"},
                [](Packer& pk, size_t i) {
                  if (i == 0) return pk.pack_uint64(5), void();
                  if (i == 4) return pk.pack_true(), void();
                  Str(pk, std::string(i == 3 ? 129 : 1, 'k'));
                })));
  add("bool",
      Frame(1, 1,
            Map({"request_id", "token", "request_json", "subscribe"}, [](Packer& pk, size_t i) {
              if (i == 0 || i == 3) return pk.pack_uint64(5), void();
              Str(pk, "{}");
            })));
  add("stream",
      Frame(1, 12, Map({"request_id", "id", "stream", "seq", "data"}, [](Packer& pk, size_t i) {
              if (i == 2) return pk.pack_uint64(0), void();
              if (i != 1 && i != 4) return pk.pack_uint64(1), void();
              Str(pk, "x");
            })));
  add("stream missing",
      Frame(1, 12, Map({"request_id", "id", "seq", "data"}, [](Packer& pk, size_t i) {
              if (i == 0 || i == 2) return pk.pack_uint64(1), void();
              Str(pk, "x");
            })));
  add("unknown keys", get({"zzz", "request_id", "token", "id"}, [](Packer& pk, size_t i) {
        if (i == 0) return pk.pack_map(0), void();
        if (i == 1) return pk.pack_uint64(5), void();
        Str(pk, "t");
      }));

  std::string got;
  for (const auto& [name, frame] : cases) {
    got += name + ": " + Verdict(client::Decode(frame)) + " (request " +
           std::to_string(client::PeekRequestId(frame)) + ")\n";
  }
  EXPECT_EQ(got, kClientVerdicts);
}

}  // namespace
}  // namespace kiln::common::protocol
