// ExecutionFollower: follows one job's Server-Sent Events until it ends, for
// `kiln run --stream`.
//
//   ExecutionFollower follower(id, [](const FollowedEvent& e) { Print(e); });
//   StatusOr<nlohmann::json> record = follower.Follow(*client);
//
// Each event goes to the handler once, in order, even across reconnects (a
// broken stream is resumed with Last-Event-ID, a few times, with a short
// pause). The job's final record comes from `execution_end`, or from
// `execution_error` when that carries a record; an `execution_error` with an
// error object becomes that error's Status. OnEvent is the pure part (tests
// feed it events); Follow does the I/O. One thread.
#pragma once

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli/api_client.hpp"
#include "cli/sse_parser.hpp"
#include "common/status.hpp"

namespace kiln::cli {

struct FollowedEvent {
  std::string event;  // execution_start, output_chunk, execution_end, execution_error, ...
  std::string id;
  nlohmann::json data;  // the parsed data; a string when it was not JSON
};

class ExecutionFollower {
 public:
  using Handler = std::function<void(const FollowedEvent&)>;
  static constexpr int kMaxReconnects = 5;

  ExecutionFollower(std::string execution_id, Handler handler)
      : id_(std::move(execution_id)), handler_(std::move(handler)) {}

  // Reads the stream until the job ends; the final record, or why not.
  common::StatusOr<nlohmann::json> Follow(
      ApiClient& client,
      std::chrono::milliseconds reconnect_pause = std::chrono::milliseconds(500));

  // Takes one event; returns true once the job has ended (then result() holds
  // the outcome). Events repeated by a replay (same id as one already seen)
  // are not passed on twice.
  bool OnEvent(const SseEvent& event);
  bool done() const { return outcome_.has_value(); }
  common::StatusOr<nlohmann::json> result() const;
  const std::string& last_event_id() const { return last_event_id_; }

 private:
  std::string id_;
  Handler handler_;
  std::string last_event_id_;
  std::optional<common::StatusOr<nlohmann::json>> outcome_;
};

}  // namespace kiln::cli
