// The vocabulary of a message's field list, shared by both MessagePack codecs
// (codec.cpp: broker <-> worker; client_codec.cpp: native clients) and the
// visitors that walk the lists (field_counter.hpp, map_writer.hpp,
// map_reader.hpp). Internal to common/protocol.
//
// A codec lists each struct's fields once, in a Describe() overload declared
// in the struct's own namespace, so the shared visitors find it by
// argument-dependent lookup:
//
//   template <typename V>
//   void Describe(V& v, Ref<V, Cancel> m) { v.Id("job_id", m.job_id); }
//
// That one list drives the three passes over a body: FieldCounter (map size
// and a size estimate), MapWriter (packing) and MapReader (validation and
// unpacking), so encoder and decoder cannot drift apart; docs/protocol.md
// mirrors the lists. The field kinds a list may use, with the MessagePack
// each is written as and what the reader accepts:
//
//   Id(key, s)                     str; required, non-empty, <= kMaxIdBytes
//   Text(key, s, need, max)        str; str or bin of <= max bytes
//   Bytes(key, s, need, max)       bin; str or bin of <= max bytes
//   Uint(key, u, need)             uint; unsigned, within u's type
//   Enum(key, e, need, first, last)  uint; within first..last
//   Bool(key, b, need)             bool
//   Double(key, d, need)           float64; any number, finite and >= 0
//   OptionalInt(key, opt)          int when set; int32, nil = absent
//   TextList(key, v, need[, max_entries[, max_bytes]])  array of str
//   TextMap(key, m, need)          map str -> str; <= kMaxEnvEntries, unique
//   Files(key, v, need)            array of FileEntry maps; contents in total
//                                  <= kMaxFilesBytes
//   Outputs(key, v, need)          array of RichOutput maps; <= kMaxRichOutputs,
//                                  data in total <= kMaxRichOutputBytes
//   Struct(key, s, need)           map (the struct's own Describe())
//   OptionalStruct(key, opt)       map when set; nil = absent
//
// Every field is written except empty optionals; unknown keys are ignored,
// a duplicate key is an error. Header-only declarations; any thread.
#pragma once

#include <cstddef>
#include <limits>
#include <type_traits>

namespace kiln::common::protocol {

enum class Need { kRequired, kOptional };

// Decoding visitors (V::kDecodes) get the struct by mutable reference, the
// others by const reference.
template <typename V, typename T>
using Ref = std::conditional_t<V::kDecodes, T&, const T&>;

// "No list index" in a FieldPath.
inline constexpr size_t kNoIndex = std::numeric_limits<size_t>::max();

}  // namespace kiln::common::protocol
