// MessagePack encoding and decoding of the native client protocol
// (client_messages.hpp; layout in docs/protocol.md, "Client protocol").
//
//   std::string frame = client::Encode(client::Message{client::Get{1, token, "ex_1"}});
//   StatusOr<client::Message> m = client::Decode(frame);
//
// Same rules as the worker codec (codec.hpp), with which it shares the
// structural pre-scan (frame_parser.hpp): Decode never throws; truncated,
// corrupted, oversized, wrong-version and unknown-type frames, missing
// required keys, wrong types, duplicate keys and over-limit values come back
// as INVALID_REQUEST naming the problem; unknown keys are ignored.
// Stateless: any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/protocol/client_messages.hpp"
#include "common/status.hpp"

namespace kiln::common::protocol::client {

std::string Encode(const Message& message);
StatusOr<Message> Decode(std::string_view bytes);
// The frame's body.request_id when the frame is a readable envelope whose
// body has an unsigned request_id, else 0: lets an error about an otherwise
// undecodable request still name the request.
uint64_t PeekRequestId(std::string_view bytes);

}  // namespace kiln::common::protocol::client
