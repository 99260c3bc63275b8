#include "broker/api/stream_events.hpp"

#include "common/json/bounded_json.hpp"

namespace kiln::broker {

StreamEvent StartEvent(const JobRecord& record) {
  return {"execution_start",
          "start",
          {{"id", record.id},
           {"language", record.language},
           // null for a one-shot job, as in the record
           {"session_id", record.session_id.empty() ? nlohmann::json(nullptr)
                                                    : nlohmann::json(record.session_id)},
           {"status", JobStatusName(record.status)}}};
}

StreamEvent ChunkEvent(const JobStore::StoredChunk& c) {
  if (c.tool) {
    // tool_call / tool_result (docs/api.md, "Tool callbacks"): the arguments
    // were checked when the call was opened; stored text that no longer
    // parses is shown as null rather than passed on unparsed.
    const JobStore::StoredTool& t = *c.tool;
    if (t.answer) return {"tool_result", c.event_id, {{"call_id", t.call_id}, {"ok", t.ok}}};
    auto args = common::ParseJson(t.arguments_json, {.max_depth = 64, .max_values = 1u << 16});
    return {"tool_call",
            c.event_id,
            {{"call_id", t.call_id},
             {"name", t.name},
             {"arguments", args.ok() ? *std::move(args) : nlohmann::json()}}};
  }
  return {"output_chunk",
          c.event_id,
          {{"stream", c.chunk.stream == common::protocol::Stream::kStdout ? "stdout" : "stderr"},
           {"seq", c.chunk.seq},
           {"data", c.chunk.data}}};
}

StreamEvent EndEvent(const JobRecord& record) {
  const bool error = record.status == JobStatus::kError || record.status == JobStatus::kRejected;
  return {error ? "execution_error" : "execution_end", "end", record.ToJson()};
}

StreamEvent ErrorEvent(const common::Status& status) {
  return {"execution_error", "", ErrorJson(status)};
}

}  // namespace kiln::broker
