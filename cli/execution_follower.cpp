#include "cli/execution_follower.hpp"

#include <thread>

#include "common/json/bounded_json.hpp"

namespace kiln::cli {
namespace {

using common::Status;
using common::StatusOr;
using nlohmann::json;

// The Status an error object ({"code", "message", ...}) stands for.
Status StatusFromErrorObject(const json& error) {
  json wrapped = {{"error", error}};
  Status st = StatusFromHttp(500, wrapped.dump());
  return st.ok() ? common::Unavailable("execution_error without a code") : st;
}

}  // namespace

bool ExecutionFollower::OnEvent(const SseEvent& event) {
  if (done()) return true;
  if (!event.id.empty()) {
    // A replay after a reconnect starts after Last-Event-ID, so a repeat can
    // only be the event we already have.
    if (event.id == last_event_id_ && event.event != "execution_start") return false;
    last_event_id_ = event.id;
  }
  auto data = common::ParseJson(event.data);
  FollowedEvent e{event.event, event.id, data.ok() ? std::move(*data) : json(event.data)};
  handler_(e);
  if (e.event == "execution_end") {
    if (e.data.is_object()) {
      outcome_ = StatusOr<json>(e.data);
    } else {
      outcome_ = StatusOr<json>(common::Unavailable("execution_end without a record"));
    }
    return true;
  }
  if (e.event == "execution_error") {
    if (e.data.is_object() && e.data.contains("status")) {
      outcome_ = StatusOr<json>(e.data);
    } else if (e.data.is_object() && e.data.contains("error") && e.data["error"].is_object()) {
      outcome_ = StatusOr<json>(StatusFromErrorObject(e.data["error"]));
    } else {
      outcome_ = StatusOr<json>(StatusFromErrorObject(e.data));
    }
    return true;
  }
  return false;
}

StatusOr<json> ExecutionFollower::result() const {
  if (!outcome_) return common::Unavailable("the event stream of " + id_ + " has not ended");
  return *outcome_;
}

StatusOr<json> ExecutionFollower::Follow(ApiClient& client,
                                         std::chrono::milliseconds reconnect_pause) {
  Status last_error;
  for (int attempt = 0; attempt <= kMaxReconnects; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(reconnect_pause);
    Status st =
        client.StreamEvents(id_, last_event_id_, [this](const SseEvent& e) { return !OnEvent(e); });
    if (done()) return result();
    // Refusals (unknown id, bad token) will not change on a retry.
    if (!st.ok() && st.code() != common::Code::kUnavailable) return st;
    last_error = st.ok() ? common::Unavailable("the broker closed the event stream of " + id_ +
                                               " before the job ended")
                         : st;
  }
  return last_error.WithContext("following " + id_);
}

}  // namespace kiln::cli
