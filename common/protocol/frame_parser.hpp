// The first stage of decoding a MessagePack frame, shared by the broker <->
// worker codec (codec.hpp) and the client codec (client_codec.hpp).
//
//   Status st = ParseFrame(bytes, [&](const msgpack::object& root) { ...; return Status::Ok(); });
//
// Checks the frame's size (kMaxMessageBytes, not empty), runs the structural
// pre-scan (one complete value, no trailing bytes, bounded entries, nesting
// and str/bin size; docs/protocol.md "Decoder rules"), unpacks it without
// copying strings and calls `visit` on the root. The tree (and the strings it
// points to in `bytes`) is valid only during the call. Never throws: msgpack
// errors become INVALID_REQUEST. Internal to common/protocol; any thread.
// Defined in codec.cpp.
#pragma once

#include <functional>
#include <msgpack.hpp>
#include <string_view>

#include "common/status.hpp"

namespace kiln::common::protocol {

Status ParseFrame(std::string_view bytes,
                  const std::function<Status(const msgpack::object& root)>& visit);

// Helpers both decoders use on the tree ParseFrame hands them.
// The name of a MessagePack type in errors ("unsigned integer", "map", ...).
std::string_view TypeLabel(msgpack::type::object_type t);
// str and bin both carry text (bin when it need not be UTF-8).
bool IsText(const msgpack::object& o);
// The bytes of a str or bin object (IsText).
std::string_view View(const msgpack::object& o);
// INVALID_REQUEST "expected <expected>, got <type of o>".
Status WrongType(std::string_view expected, const msgpack::object& o);

}  // namespace kiln::common::protocol
