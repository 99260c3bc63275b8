// Writes the MessagePack seed frames of the codec fuzz targets, encoded by
// the codecs themselves, so the corpus stays in step with the wire format:
//
//   ninja -C build fuzz_seed_frames
//   ./build/tests/fuzz/fuzz_seed_frames tests/fuzz/corpus
//
// writes corpus/protocol_fuzz/*.bin (every broker <-> worker message, full and
// minimal) and corpus/client_protocol_fuzz/*.bin (every client message, plus
// hand-packed frames each differing from a valid one in one way: unknown
// key, bin for str, maximal ids, duplicate key, wrong version, body not a
// map, type unknown). Rerun when a message gains a field.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <msgpack.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/protocol/client_codec.hpp"
#include "common/protocol/codec.hpp"
#include "tests/unit/protocol/sample_messages.hpp"

namespace {

namespace fs = std::filesystem;
namespace protocol = kiln::common::protocol;
namespace client = kiln::common::protocol::client;

void Write(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / (name + ".bin"), std::ios::binary) << bytes;
}

// [version, type, body] with the body written by `body`.
template <typename F>
std::string Frame(uint64_t version, uint64_t type, uint32_t fields, F body) {
  std::stringstream out;
  msgpack::packer<std::stringstream> pk(out);
  pk.pack_array(3);
  pk.pack_uint64(version);
  pk.pack_uint64(type);
  pk.pack_map(fields);
  body(pk);
  return out.str();
}

template <typename P>
void Str(P& pk, const std::string& s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

std::vector<std::pair<std::string, std::string>> ClientFrames() {
  using client::Message;
  const std::vector<Message> messages = {
      client::Submit{1, "tok-en-12",
                     R"j({"language":"python","code":"print(1)","input":{"n":[1,2]}})j", "key-1",
                     true},
      client::Submit{2, "t", "{}", "", false},
      client::Subscribe{3, "tok", "ex_1", 0},
      client::Subscribe{UINT64_MAX, "tok", "ex_1", 17},
      client::Cancel{4, "tok", "ex_2"},
      client::Get{0, "tok", std::string(128, 'x')},
      client::Accepted{5, "ex_4", "queued"},
      client::Output{6, "ex_5", protocol::Stream::kStderr, 42, std::string("a\0b\xff", 4)},
      client::Result{7, "ex_6", R"({"id":"ex_6","status":"succeeded"})"},
      client::Error{8, "UNAUTHORIZED", "unknown token", false, ""},
      client::Error{9, "QUEUE_FULL", "later", true, "ex_7"},
  };
  std::vector<std::pair<std::string, std::string>> frames;
  int i = 0;
  for (const Message& m : messages) {
    frames.emplace_back(std::to_string(i++) + "_" + client::TypeName(client::TypeOf(m)),
                        client::Encode(m));
  }
  frames.emplace_back("get_unknown_key", Frame(1, 4, 4, [](auto& pk) {
                        Str(pk, "request_id");
                        pk.pack_uint64(1);
                        Str(pk, "token");
                        Str(pk, "t");
                        Str(pk, "id");
                        Str(pk, "ex_1");
                        Str(pk, "later_field");
                        pk.pack_array(2);
                        pk.pack_nil();
                        pk.pack_double(1.5);
                      }));
  frames.emplace_back("submit_bin_json", Frame(1, 1, 3, [](auto& pk) {
                        Str(pk, "request_id");
                        pk.pack_uint64(2);
                        Str(pk, "token");
                        Str(pk, "t");
                        Str(pk, "request_json");
                        const std::string json = R"j({"language":"shell","code":"echo \u00e9"})j";
                        pk.pack_bin(static_cast<uint32_t>(json.size()));
                        pk.pack_bin_body(json.data(), static_cast<uint32_t>(json.size()));
                      }));
  frames.emplace_back("get_duplicate_key", Frame(1, 4, 4, [](auto& pk) {
                        Str(pk, "request_id");
                        pk.pack_uint64(1);
                        Str(pk, "token");
                        Str(pk, "t");
                        Str(pk, "id");
                        Str(pk, "ex_1");
                        Str(pk, "id");
                        Str(pk, "ex_2");
                      }));
  frames.emplace_back("cancel_version_2", Frame(2, 3, 1, [](auto& pk) {
                        Str(pk, "request_id");
                        pk.pack_uint64(1);
                      }));
  frames.emplace_back("subscribe_negative_seq", Frame(1, 2, 4, [](auto& pk) {
                        Str(pk, "request_id");
                        pk.pack_uint64(1);
                        Str(pk, "token");
                        Str(pk, "t");
                        Str(pk, "id");
                        Str(pk, "ex_1");
                        Str(pk, "from_seq");
                        pk.pack_int64(-1);
                      }));
  frames.emplace_back("unknown_type", Frame(1, 99, 0, [](auto&) {}));
  std::stringstream not_map;
  msgpack::packer<std::stringstream> pk(not_map);
  pk.pack_array(3);
  pk.pack_uint64(1);
  pk.pack_uint64(4);
  pk.pack_array(0);
  frames.emplace_back("body_not_map", not_map.str());
  return frames;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <tests/fuzz/corpus>\n", argv[0]);
    return 2;
  }
  const fs::path out = argv[1];
  int i = 0;
  for (const auto& m : protocol::samples::FullMessages()) {
    Write(out / "protocol_fuzz",
          std::to_string(i++) + "_full_" + protocol::TypeName(protocol::TypeOf(m)),
          protocol::Encode(m));
  }
  for (const auto& m : protocol::samples::MinimalMessages()) {
    Write(out / "protocol_fuzz",
          std::to_string(i++) + "_minimal_" + protocol::TypeName(protocol::TypeOf(m)),
          protocol::Encode(m));
  }
  for (const auto& [name, bytes] : ClientFrames()) {
    Write(out / "client_protocol_fuzz", name, bytes);
  }
  return 0;
}
