#include "broker/api/sse_events.hpp"

namespace kiln::broker {
namespace {

bool Digits(std::string_view s) {
  if (s.empty() || s.size() > 20) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

}  // namespace

std::string SseEvent(std::string_view event, std::string_view id, const nlohmann::json& data) {
  std::string out = "event: ";
  out.append(event);
  if (!id.empty()) {
    out += "\nid: ";
    out.append(id);
  }
  out += "\ndata: ";
  // A JSON text has no raw newline, so it is always one data line.
  out += data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  out += "\n\n";
  return out;
}

common::StatusOr<LastEventId> ParseLastEventId(std::string_view header) {
  LastEventId out;
  if (header.empty()) return out;
  if (header == "start") {
    out.kind = LastEventId::Kind::kStart;
    return out;
  }
  if (header == "end") {
    out.kind = LastEventId::Kind::kEnd;
    return out;
  }
  auto dash = header.find('-');
  if (dash != std::string_view::npos && Digits(header.substr(0, dash)) &&
      Digits(header.substr(dash + 1))) {
    out.kind = LastEventId::Kind::kEntry;
    out.entry = std::string(header);
    return out;
  }
  return common::InvalidRequest(
      "Last-Event-ID: expected an event id this stream sent (start, end or <ms>-<seq>)");
}

}  // namespace kiln::broker
