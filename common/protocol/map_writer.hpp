// MapWriter: packs a body's fields (field_list.hpp) as a MessagePack map of
// key/value pairs, and EncodeFrame, which wraps a body in the envelope both
// protocols share, [version, type, body-map]:
//
//   std::string frame = EncodeFrame(kProtocolVersion, uint8_t{7}, Cancel{"ex_1"});
//
// Every field is written except empty optionals, so a frame is
// self-describing and defaults need no agreement. For the codecs in
// common/protocol; a MapWriter lives for one frame, any thread.
#pragma once

#include <cstdint>
#include <map>
#include <msgpack.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/protocol/field_counter.hpp"
#include "common/protocol/field_list.hpp"
#include "common/protocol/messages.hpp"

namespace kiln::common::protocol {

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

class MapWriter {
 public:
  static constexpr bool kDecodes = false;

  MapWriter(Packer& pk, StringSink& sink) : pk_(pk), sink_(sink) {}

  // Packs `value`'s map: its entry count, then its fields.
  template <typename T>
  static void PackMap(Packer& pk, StringSink& sink, const T& value) {
    FieldCounter counter;
    Describe(counter, value);
    pk.pack_map(static_cast<uint32_t>(counter.fields()));
    MapWriter writer(pk, sink);
    Describe(writer, value);
  }

  void Id(std::string_view key, const std::string& v);
  void Text(std::string_view key, const std::string& v, Need, size_t);
  void Bytes(std::string_view key, const std::string& v, Need, size_t);
  template <typename U>
  void Uint(std::string_view key, const U& v, Need) {
    Key(key);
    pk_.pack_uint64(v);
  }
  template <typename E>
  void Enum(std::string_view key, const E& v, Need, E, E) {
    Key(key);
    pk_.pack_uint64(static_cast<uint64_t>(v));
  }
  void Bool(std::string_view key, const bool& v, Need);
  void Double(std::string_view key, const double& v, Need);
  void OptionalInt(std::string_view key, const std::optional<int32_t>& v);
  void TextList(std::string_view key, const std::vector<std::string>& v, Need,
                size_t = kMaxListEntries, size_t = kMaxStringBytes);
  void TextMap(std::string_view key, const std::map<std::string, std::string>& v, Need);
  template <typename F>  // FileEntry, whose Describe() the codec declares
  void Files(std::string_view key, const std::vector<F>& v, Need) {
    Key(key);
    pk_.pack_array(static_cast<uint32_t>(v.size()));
    for (const F& f : v) PackMap(pk_, sink_, f);
  }
  template <typename O>  // RichOutput, whose Describe() the codec declares
  void Outputs(std::string_view key, const std::vector<O>& v, Need need) {
    Files(key, v, need);  // the same layout: an array of maps
  }
  template <typename T>
  void Struct(std::string_view key, const T& v, Need) {
    Key(key);
    PackMap(pk_, sink_, v);
  }
  template <typename T>
  void OptionalStruct(std::string_view key, const std::optional<T>& v) {
    if (v.has_value()) Struct(key, *v, Need::kOptional);
  }

 private:
  void Key(std::string_view key);

  Packer& pk_;
  StringSink& sink_;  // pk_'s stream, for values written by hand
};

// [version, type, body-map] as one frame.
template <typename Body>
std::string EncodeFrame(uint32_t version, uint8_t type, const Body& body) {
  FieldCounter counter;
  Describe(counter, body);
  std::string frame;
  frame.reserve(counter.bytes() + 16);
  StringSink sink(&frame);
  Packer pk(sink);
  pk.pack_array(3);
  pk.pack_uint32(version);
  pk.pack_uint8(type);
  pk.pack_map(static_cast<uint32_t>(counter.fields()));
  MapWriter writer(pk, sink);
  Describe(writer, body);
  return frame;
}

}  // namespace kiln::common::protocol
