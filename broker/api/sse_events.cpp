#include "broker/api/sse_events.hpp"

#include <charconv>
#include <cstdint>

#include "common/json/bounded_json.hpp"

namespace kiln::broker {
namespace {

// A decimal that fits 64 bits, as Redis's stream ids need.
bool U64(std::string_view s) {
  if (s.empty() || s.size() > 20) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  uint64_t v;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size();
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
  out += common::DumpJson(data);
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
  if (dash != std::string_view::npos && U64(header.substr(0, dash)) &&
      U64(header.substr(dash + 1))) {
    out.kind = LastEventId::Kind::kEntry;
    out.entry = std::string(header);
    return out;
  }
  return common::InvalidRequest(
      "Last-Event-ID: expected an event id this stream sent (start, end or <ms>-<seq>)");
}

}  // namespace kiln::broker
