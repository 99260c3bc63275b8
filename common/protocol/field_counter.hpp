// FieldCounter: the first pass of encoding a body (field_list.hpp). Counts the
// entries the body's map will have, which MessagePack writes before them, and
// estimates the packed size so the frame is allocated once. For map_writer.hpp
// and the codecs; a value type, one use per body.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/protocol/field_list.hpp"
#include "common/protocol/messages.hpp"

namespace kiln::common::protocol {

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
  void Outputs(std::string_view key, const std::vector<RichOutput>& v, Need) {
    size_t n = 0;
    for (const RichOutput& o : v) n += o.mime.size() + o.data.size() + 32;
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

}  // namespace kiln::common::protocol
