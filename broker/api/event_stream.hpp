// EventStream: one client's Server-Sent Events stream of an execution
// (GET /v1/executions/{id}/events, docs/api.md "Streaming"), fed by the
// broker's shared OutputFollower: it holds no thread and no Redis
// connection while open, and at most kMaxBuffered bytes its client has not
// taken (a client that stops reading stops the follower for this stream
// only; the rest waits in Redis).
//
//   EventStream::Start(exchange, &follower, &server, record, last_event_id, std::move(hold),
//                      {&unread, tenant, limit});
//
// Sends execution_start (unless resuming), output_chunk events, then
// execution_end or execution_error (the record), and a comment line every
// kKeepAlive while nothing else is sent. `hold` (the tenant's stream quota)
// is released when the stream ends or the client leaves. The last event,
// with the whole record, is charged to the tenant's UnreadBudget until it is
// written; while that is full the stream declines the end and is offered it
// again.
// Start() from any thread; the Reader methods on the follower's thread.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>

#include "broker/api/sse_events.hpp"
#include "broker/http/http_exchange.hpp"
#include "broker/http/http_server.hpp"
#include "broker/http/quota_counter.hpp"
#include "broker/stream/output_follower.hpp"
#include "broker/stream/unread_budget.hpp"

namespace kiln::broker {

class EventStream : public OutputFollower::Reader,
                    public std::enable_shared_from_this<EventStream> {
 public:
  static constexpr size_t kMaxBuffered = 256u << 10;
  static constexpr auto kKeepAlive = std::chrono::seconds(15);

  // Where the last event is charged.
  struct Unread {
    UnreadBudget* budget = nullptr;  // not owned; outlives the follower's entries
    std::string tenant;
    size_t limit = 0;
  };

  static void Start(std::shared_ptr<HttpExchange> exchange, OutputFollower* follower,
                    HttpServer* timers, const JobRecord& record, const LastEventId& last,
                    QuotaCounter::Hold hold, Unread unread);

  EventStream(std::shared_ptr<HttpExchange> exchange, OutputFollower* follower, HttpServer* timers,
              QuotaCounter::Hold hold, Unread unread)
      : exchange_(std::move(exchange)),
        follower_(follower),
        timers_(timers),
        unread_(std::move(unread)),
        hold_(std::move(hold)) {}

  size_t Buffered() override;
  bool HasRoom() override;
  void OnChunks(std::vector<JobStore::StoredChunk>& chunks) override;
  bool OnEnd(const JobRecord& record) override;
  void OnError(const common::Status& status) override;

 private:
  void Send(std::string text);
  void Finish(std::string last_event, UnreadBudget::Charge charge = nullptr);
  void OnClosed();
  void KeepAlive();

  std::shared_ptr<HttpExchange> exchange_;
  OutputFollower* follower_;
  HttpServer* timers_;
  const Unread unread_;
  std::mutex mu_;
  QuotaCounter::Hold hold_;    // guarded by mu_
  OutputFollower::Id id_ = 0;  // guarded by mu_
  bool done_ = false;          // guarded by mu_: ended, failed or the client left
  std::chrono::steady_clock::time_point last_send_;  // guarded by mu_
};

}  // namespace kiln::broker
