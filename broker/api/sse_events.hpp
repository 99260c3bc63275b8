// Server-Sent Events of an execution (docs/api.md, "Streaming"): the text of
// one event, and the client's Last-Event-ID, checked.
//
//   std::string e = SseEvent("output_chunk", "1700000000000-0", data);
//   ASSIGN_OR_RETURN(LastEventId last, ParseLastEventId(req.Header("last-event-id")));
//
// Event ids are "start" (execution_start), a Redis stream entry id
// "<ms>-<seq>" (output_chunk) and "end" (the last event). Pure; any thread.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.hpp"

namespace kiln::broker {

std::string SseEvent(std::string_view event, std::string_view id, const nlohmann::json& data);

struct LastEventId {
  enum class Kind {
    kNone,   // no header: from the start, execution_start included
    kStart,  // saw execution_start: every chunk, no second start
    kEntry,  // saw the chunk `entry`: the chunks after it
    kEnd,    // saw the end: nothing more will come
  };
  Kind kind = Kind::kNone;
  std::string entry;  // kEntry: "<ms>-<seq>"
};

// INVALID_REQUEST naming the header for anything but the ids above (at most
// 41 characters: two 20-digit numbers and a dash).
common::StatusOr<LastEventId> ParseLastEventId(std::string_view header);

}  // namespace kiln::broker
