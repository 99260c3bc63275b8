// WsFollow: one execution followed on a WebSocket connection (docs/api.md,
// "WebSocket channel"): an OutputFollower reader that sends the execution's
// events as `{"type": "event", ...}` messages of its WsSession. It is the
// WebSocket twin of EventStream: the same events (stream_events.hpp), the
// same backpressure (no more than kMaxBuffered unsent bytes on the
// connection, then the follower skips it until the connection drains), the
// same charge of the last event to the tenant's UnreadBudget.
//
//   auto f = std::make_shared<WsFollow>(session, id, std::move(hold), unread);
//   f->set_id(follower->Follow(id, after, f));
//
// Threads: the Reader methods on the follower's thread; Stop() from any.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "broker/api/stream_events.hpp"
#include "broker/http/quota_counter.hpp"
#include "broker/stream/output_follower.hpp"
#include "broker/stream/unread_budget.hpp"

namespace kiln::broker {

class WsSession;

class WsFollow : public OutputFollower::Reader {
 public:
  static constexpr size_t kMaxBuffered = 256u << 10;

  // Where the last event is charged.
  struct Unread {
    UnreadBudget* budget = nullptr;  // not owned; outlives the follower's entries
    std::string tenant;
    size_t limit = 0;
  };

  WsFollow(std::weak_ptr<WsSession> session, std::string execution_id, QuotaCounter::Hold hold,
           Unread unread)
      : session_(std::move(session)),
        execution_id_(std::move(execution_id)),
        unread_(std::move(unread)),
        hold_(std::move(hold)) {}

  // The message that carries `e` for `execution_id`.
  static std::string Message(const std::string& execution_id, const StreamEvent& e);

  size_t Buffered() override;
  bool HasRoom() override;
  void OnChunks(std::vector<JobStore::StoredChunk>& chunks) override;
  bool OnEnd(const JobRecord& record) override;
  void OnError(const common::Status& status) override;

  // Nothing more is sent; the stream quota is given back. Idempotent.
  void Stop();
  bool stopped() const { return stopped_; }
  const std::string& execution_id() const { return execution_id_; }
  OutputFollower::Id id() const { return id_; }
  void set_id(OutputFollower::Id id) { id_ = id; }

 private:
  // The last event went out: the follow is over.
  void Finish(std::string message, UnreadBudget::Charge charge);

  const std::weak_ptr<WsSession> session_;
  const std::string execution_id_;
  const Unread unread_;
  std::atomic<bool> stopped_{false};
  std::atomic<OutputFollower::Id> id_{0};
  QuotaCounter::Hold hold_;  // released by the one Stop() that sets stopped_
};

}  // namespace kiln::broker
