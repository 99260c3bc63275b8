// The rules for an execution's rich outputs (protocol::RichOutput: a mime type
// and its bytes), applied by the worker when it reads them from a runtime and
// again by the broker when a worker's Result arrives (a worker is untrusted).
//
//   bool cut = common::BoundRichOutputs(&result.outputs);  // drops bad/excess entries
//   if (cut) result.outputs_truncated = true;
//
// Pure functions; any thread.
#pragma once

#include <string_view>
#include <vector>

#include "common/protocol/messages.hpp"

namespace kiln::common {

// `type/subtype`, each part 1+ characters of [A-Za-z0-9!#$&^_.+-] starting
// with a letter or digit (RFC 6838's restricted-name), at most
// protocol::kMaxMimeBytes in all; no parameters (";charset=...").
bool IsValidMime(std::string_view mime);

// True for mime types whose data is UTF-8 text (text/*, application/json):
// the API shows those as a string, everything else as base64.
bool IsTextMime(std::string_view mime);

// Keeps, in order, the outputs with a valid mime type, at most
// protocol::kMaxRichOutputs of them and protocol::kMaxRichOutputBytes of
// data in all (an output over the remaining budget is dropped, smaller ones
// after it still fit). Returns true when anything was dropped.
bool BoundRichOutputs(std::vector<protocol::RichOutput>* outputs);

}  // namespace kiln::common
