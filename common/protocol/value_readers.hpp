// The value-level checks of decoding (docs/protocol.md "Decoder rules"): each
// reads one MessagePack object of the tree ParseFrame hands out, or returns
// INVALID_REQUEST saying what was wrong with it. MapReader (map_reader.hpp)
// prefixes the field's path. Internal to common/protocol; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <msgpack.hpp>
#include <string>

#include "common/status.hpp"

namespace kiln::common::protocol {

// str or bin of at most max_bytes.
Status ReadText(const msgpack::object& o, size_t max_bytes, std::string* out);
// An unsigned integer of at most max.
Status ReadUint(const msgpack::object& o, uint64_t max, uint64_t* out);
// Any integer within int32.
Status ReadInt32(const msgpack::object& o, int32_t* out);
// Any number (float or integer), finite and >= 0.
Status ReadDouble(const msgpack::object& o, double* out);
// "<n> entries exceeds the limit of <limit>".
Status TooMany(size_t n, size_t limit);

}  // namespace kiln::common::protocol
