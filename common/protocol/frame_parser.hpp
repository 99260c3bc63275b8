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
// errors become INVALID_REQUEST. CheckEnvelope then checks the root is
// [version, type, body] of the right version. Internal to common/protocol;
// any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <msgpack.hpp>
#include <optional>
#include <string_view>
#include <utility>

#include "common/status.hpp"

namespace kiln::common::protocol {

Status ParseFrame(std::string_view bytes,
                  const std::function<Status(const msgpack::object& root)>& visit);

// The envelope checks both protocols share, in order (the version first, so a
// future envelope is reported as a version mismatch rather than as a
// malformed frame): the root is an array, non-empty, its first element is
// `version`, it has 3 elements and the second (the type) is unsigned.
// `protocol` names the protocol in a version mismatch ("client protocol").
Status CheckEnvelope(const msgpack::object& frame, uint32_t version, std::string_view protocol);

// ParseFrame, then `decode_root` (which builds the message from the tree).
template <typename M, typename DecodeRoot>
StatusOr<M> ParseMessage(std::string_view bytes, DecodeRoot decode_root) {
  std::optional<M> message;
  Status st = ParseFrame(bytes, [&message, &decode_root](const msgpack::object& root) {
    StatusOr<M> m = decode_root(root);
    if (!m.ok()) return m.status();
    message = std::move(m).value();
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return std::move(*message);
}

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
