#include "tests/support/sse_reader.hpp"

#include <stdio.h>

namespace kiln::testing {

std::vector<SseEvent> ReadSseEvents(const std::string& url, const std::string& token,
                                    const std::string& last_event_id,
                                    const std::function<void(const SseEvent&)>& on_event) {
  std::string cmd = "curl -sN --max-time 60 -H 'Authorization: Bearer " + token + "'";
  if (!last_event_id.empty()) cmd += " -H 'Last-Event-ID: " + last_event_id + "'";
  cmd += " " + url;
  FILE* f = popen(cmd.c_str(), "r");
  std::vector<SseEvent> events;
  SseEvent cur;
  char line[1 << 16];
  while (f != nullptr && fgets(line, sizeof(line), f) != nullptr) {
    std::string l(line);
    if (!l.empty() && l.back() == '\n') l.pop_back();
    if (l.rfind("event: ", 0) == 0) {
      cur.event = l.substr(7);
    } else if (l.rfind("id: ", 0) == 0) {
      cur.id = l.substr(4);
    } else if (l.rfind("data: ", 0) == 0) {
      cur.data = nlohmann::json::parse(l.substr(6), nullptr, false);
    } else if (l.empty() && !cur.event.empty()) {
      cur.at = std::chrono::steady_clock::now();
      if (on_event) on_event(cur);
      events.push_back(cur);
      cur = SseEvent{};
    }
  }
  if (f != nullptr) pclose(f);
  return events;
}

}  // namespace kiln::testing
