// MapReader: reads a body's fields (field_list.hpp) out of one MessagePack
// map of the tree ParseFrame hands out, checking each value's type and limit,
// and DecodeMap / DecodeBody, which check that a value is a map with string
// keys before reading it:
//
//   StatusOr<Cancel> m = DecodeBody<Cancel>(body, "cancel");
//
// The first error wins and comes back as INVALID_REQUEST prefixed with the
// field's path ("execute.files[3].path: 70000 bytes exceeds ..."). Keys are
// looked up by a linear scan, which also catches duplicates; unknown keys are
// ignored. For the codecs in common/protocol; a MapReader lives for one map,
// any thread.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <msgpack.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/protocol/field_list.hpp"
#include "common/protocol/field_path.hpp"
#include "common/protocol/frame_parser.hpp"
#include "common/protocol/messages.hpp"
#include "common/protocol/value_readers.hpp"
#include "common/status.hpp"

namespace kiln::common::protocol {

// Reads the map `o` (named `path` in errors) into `out` by its Describe().
template <typename T>
Status DecodeMap(const msgpack::object& o, const FieldPath& path, T* out);

class MapReader {
 public:
  static constexpr bool kDecodes = true;

  MapReader(const msgpack::object_map& map, const FieldPath& path) : map_(map), path_(path) {}

  const Status& status() const { return status_; }

  void Id(std::string_view key, std::string& v);
  void Text(std::string_view key, std::string& v, Need need, size_t max_bytes);
  void Bytes(std::string_view key, std::string& v, Need need, size_t max_bytes);
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
    if (!InRange(key, u, static_cast<uint64_t>(first), static_cast<uint64_t>(last))) return;
    v = static_cast<E>(u);
  }
  void Bool(std::string_view key, bool& v, Need need);
  void Double(std::string_view key, double& v, Need need);
  // nil is read as absent, for encoders that write null for "no value".
  void OptionalInt(std::string_view key, std::optional<int32_t>& v);
  void TextList(std::string_view key, std::vector<std::string>& v, Need need,
                size_t max_entries = kMaxListEntries, size_t max_bytes = kMaxStringBytes);
  void TextMap(std::string_view key, std::map<std::string, std::string>& v, Need need);
  template <typename F>  // FileEntry, whose Describe() the codec declares
  void Files(std::string_view key, std::vector<F>& v, Need need) {
    const msgpack::object_array* a = FindArray(key, need, kMaxFiles);
    if (a == nullptr) return;
    v.resize(a->size);
    size_t total = 0;
    for (uint32_t i = 0; i < a->size && status_.ok(); ++i) {
      const FieldPath entry{&path_, key, i};
      status_ = DecodeMap(a->ptr[i], entry, &v[i]);
      total += v[i].content.size();
    }
    if (status_.ok()) CheckFilesTotal(key, total);
  }
  template <typename O>  // RichOutput, whose Describe() the codec declares
  void Outputs(std::string_view key, std::vector<O>& v, Need need) {
    const msgpack::object_array* a = FindArray(key, need, kMaxRichOutputs);
    if (a == nullptr) return;
    v.resize(a->size);
    size_t total = 0;
    for (uint32_t i = 0; i < a->size && status_.ok(); ++i) {
      const FieldPath entry{&path_, key, i};
      status_ = DecodeMap(a->ptr[i], entry, &v[i]);
      total += v[i].data.size();
    }
    if (status_.ok()) CheckTotal(key, total, kMaxRichOutputBytes);
  }
  template <typename T>
  void Struct(std::string_view key, T& v, Need need) {
    const msgpack::object* o = Find(key, need);
    if (o == nullptr) return;
    const FieldPath inner{&path_, key};
    status_ = DecodeMap(*o, inner, &v);
  }
  // nil is read as absent, as for OptionalInt.
  template <typename T>
  void OptionalStruct(std::string_view key, std::optional<T>& v) {
    const msgpack::object* o = Find(key, Need::kOptional);
    if (o == nullptr || o->type == msgpack::type::NIL) return;
    const FieldPath inner{&path_, key};
    T value;
    status_ = DecodeMap(*o, inner, &value);
    if (status_.ok()) v = std::move(value);
  }

 private:
  // The value under `key`, or nullptr when it is absent (an error when it is
  // required), when it appears twice (an error), or after an earlier error.
  const msgpack::object* Find(std::string_view key, Need need);
  // Find, for an array of at most max_entries (else an error and nullptr).
  const msgpack::object_array* FindArray(std::string_view key, Need need, size_t max_entries);
  bool InRange(std::string_view key, uint64_t u, uint64_t lo, uint64_t hi);
  void CheckFilesTotal(std::string_view key, size_t total) {
    CheckTotal(key, total, kMaxFilesBytes);
  }
  void CheckTotal(std::string_view key, size_t total, size_t max);
  // Records `st`, prefixed with the field's path, if it is an error.
  void Check(std::string_view key, const Status& st, size_t index = kNoIndex);

  const msgpack::object_map& map_;
  const FieldPath& path_;
  Status status_;
};

// Checks that `o` is a map whose keys are all text; an error names `path`.
Status CheckMapKeys(const msgpack::object& o, const FieldPath& path);

template <typename T>
Status DecodeMap(const msgpack::object& o, const FieldPath& path, T* out) {
  RETURN_IF_ERROR(CheckMapKeys(o, path));
  MapReader reader(o.via.map, path);
  Describe(reader, *out);
  return reader.status();
}

// A message body: the top-level map, named `name` in errors.
template <typename T>
StatusOr<T> DecodeBody(const msgpack::object& body, std::string_view name) {
  const FieldPath path{nullptr, name};
  T message;
  RETURN_IF_ERROR(DecodeMap(body, path, &message));
  return message;
}

}  // namespace kiln::common::protocol
