// The events of an execution's stream (docs/api.md, "Streaming"), built once
// for both ways a client follows it: as Server-Sent Events (EventStream)
// and as messages of the WebSocket channel (WsFollow).
//
//   StreamEvent e = ChunkEvent(chunk);
//   exchange->Send(SseEvent(e.event, e.id, e.data));
//
// Pure; any thread.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "broker/job/job.hpp"
#include "broker/store/job_store.hpp"
#include "common/status.hpp"

namespace kiln::broker {

struct StreamEvent {
  std::string event;  // execution_start, output_chunk, tool_call, ...
  std::string id;     // "start", a stream entry id, "end", or "" (an error)
  nlohmann::json data;
};

// execution_start: {"id", "language", "session_id", "status"}.
StreamEvent StartEvent(const JobRecord& record);
// output_chunk, or tool_call / tool_result for a chunk that is a tool entry.
StreamEvent ChunkEvent(const JobStore::StoredChunk& chunk);
// execution_end with the record, or execution_error when it ended error/rejected.
StreamEvent EndEvent(const JobRecord& record);
// execution_error with an error object (the broker lost Redis).
StreamEvent ErrorEvent(const common::Status& status);

}  // namespace kiln::broker
