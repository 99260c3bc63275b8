// SseParser: an incremental parser for a Server-Sent Events stream
// (text/event-stream, as GET /v1/executions/{id}/events sends it).
//
//   SseParser parser;
//   for (const SseEvent& e : parser.Feed(chunk)) Handle(e.event, e.id, e.data);
//
// Bytes may arrive split anywhere (inside a line, between "\r" and "\n");
// complete events come out in order. Follows the WHATWG rules the broker
// needs: fields `event`, `id`, `data` (several data lines join with "\n"),
// comment lines (":...") ignored, unknown fields ignored, an event is
// dispatched on a blank line and only when it has data or a name. A line
// longer than kMaxLineBytes is an error (the stream is then unusable). Pure;
// one thread at a time. Used by ApiClient::StreamEvents (kiln run --stream).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.hpp"

namespace kiln::cli {

struct SseEvent {
  std::string event = "message";  // the `event:` field, "message" when absent
  std::string id;                 // the last `id:` seen so far (SSE keeps it across events)
  std::string data;
};

class SseParser {
 public:
  static constexpr size_t kMaxLineBytes = 16 << 20;

  // Consumes `bytes`; returns the events they completed. After an error every
  // later call returns it too.
  common::StatusOr<std::vector<SseEvent>> Feed(std::string_view bytes);

  // The id of the last event dispatched ("" before any): what a reconnect
  // sends as Last-Event-ID.
  const std::string& last_event_id() const { return last_event_id_; }

 private:
  void Line(std::string_view line, std::vector<SseEvent>* out);

  std::string partial_;   // bytes of the current, unfinished line
  bool skip_lf_ = false;  // the last byte was '\r': a following '\n' ends nothing
  std::string event_;     // fields of the event being built
  std::string data_;
  bool has_data_ = false;
  std::string id_;  // the id buffer (persists between events)
  std::string last_event_id_;
  common::Status error_;
};

}  // namespace kiln::cli
