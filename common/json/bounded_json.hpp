// ParseJson: JSON text from an untrusted party (a client, a job, a worker,
// a stored record) into an nlohmann::json, with limits checked while parsing.
//
//   ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(body, {.max_depth = 16}));
//   std::string again = j.dump();   // safe: the depth is bounded
//
// nlohmann's parser is iterative, but dump(), comparisons and copies of the
// result recurse once per level: a body of 300,000 '[' would overflow the
// stack in the first dump(). ParseJson builds the value itself from SAX
// events and stops at the first container deeper than `max_depth` or the
// value past `max_values`, before any of them is built, so every value it
// returns is safe to hand to recursive code. Pure function; any thread.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.hpp"

namespace kiln::common {

struct JsonLimits {
  // Containers nested inside each other; the top-level value is depth 1.
  size_t max_depth = 128;
  // Values of any kind (containers, keys excluded, scalars included): bounds
  // the memory a parse may take, about 16-80 bytes per value.
  size_t max_values = 1u << 20;
};

// INVALID_REQUEST naming the byte offset for malformed text (invalid UTF-8
// included), and naming the limit when one is passed. `what` starts the
// message ("request body", "control frame").
StatusOr<nlohmann::json> ParseJson(std::string_view text, const JsonLimits& limits = {},
                                   std::string_view what = "JSON");

// Compact JSON text as Kiln writes it everywhere (stored records, answers):
// invalid UTF-8 in strings (a job's output) becomes U+FFFD instead of
// throwing.
inline std::string DumpJson(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kiln::common
