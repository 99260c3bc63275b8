// ReadSseEvents: an execution's Server-Sent Events as a client reads them,
// through curl (a real HTTP client, not the broker's code), for integration
// tests.
//
//   auto events = ReadSseEvents(cluster.url(1) + "/v1/executions/" + id + "/events",
//                               TestCluster::kToken);
//   ReadSseEvents(url, token, "", [&](const SseEvent& e) { ...answer a tool call... });
//
// Returns when the stream ends (the broker closes it after the last event)
// or after 60 s. `on_event`, if set, sees each event as it arrives, before
// the next is read. Any thread.
#pragma once

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kiln::testing {

struct SseEvent {
  std::string event, id;
  nlohmann::json data;  // discarded (is_discarded()) when the data was not JSON
  std::chrono::steady_clock::time_point at;  // when it was read
};

std::vector<SseEvent> ReadSseEvents(const std::string& url, const std::string& token,
                                    const std::string& last_event_id = "",
                                    const std::function<void(const SseEvent&)>& on_event = {});

}  // namespace kiln::testing
