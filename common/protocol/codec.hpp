// MessagePack encoding and decoding of the wire messages in messages.hpp.
//
//   std::string frame = Encode(Message{Cancel{"ex_1"}});
//   StatusOr<Message> m = Decode(frame);
//
// Decode never throws and never crashes on any input: truncated, corrupted,
// oversized (kMaxMessageBytes and the per-field limits), wrong-version and
// unknown-type frames come back as INVALID_REQUEST with a message naming what
// was wrong. Unknown keys inside a known body are ignored (forward
// compatibility within a version); missing required keys and wrongly typed
// values are errors. Stateless: any thread.
#pragma once

#include <string>
#include <string_view>

#include "common/protocol/messages.hpp"
#include "common/status.hpp"

namespace kiln::common::protocol {

std::string Encode(const Message& message);
StatusOr<Message> Decode(std::string_view bytes);

}  // namespace kiln::common::protocol
