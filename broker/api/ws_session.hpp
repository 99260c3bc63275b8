// WsSession: the broker's side of one WebSocket channel connection
// (GET /v1/ws, docs/api.md "WebSocket channel"): parses each client message
// (follow, unfollow, tool_result), applies the connection's limits, and
// answers with the API's error codes; the follows are WsFollow readers of
// the broker's OutputFollower, the answers go through ToolRelay. HttpApi
// creates one per accepted upgrade, with the caller it authenticated.
//
//   auto s = std::make_shared<WsSession>(caller, std::move(connection_hold), deps, limits);
//   exchange->AcceptWebSocket(options, s);
//
// Each message is parsed and handled on the HTTP work pool, never on the
// I/O thread, one message of a connection at a time and in the order sent
// (one pool task per message, so connections take turns). While
// kMaxQueued messages or kMaxQueuedBytes wait, the connection reads no
// more (TCP then slows the client down): a connection costs the pool at
// most one task at a time, however fast it sends.
//
// Limits (each refusal is an `error` message carrying the message's `ref`;
// the connection stays): at most `rate`/s messages with bursts of `burst`
// (counted as they arrive); a message is handled as one of the tenant's
// `max_requests` requests in progress, shared with its HTTP requests; at
// most `max_follows` follows, each holding one of the tenant's
// `max_streams` (shared with SSE).
//
// Threads: the WebSocketHandler methods on the connection's strand; the
// rest on pool threads and the follower's; all state under mu_.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "broker/api/ws_follow.hpp"
#include "broker/http/quota_counter.hpp"
#include "broker/http/websocket_channel.hpp"
#include "broker/service/execution_service.hpp"
#include "broker/service/rate_limiter.hpp"
#include "broker/stream/output_follower.hpp"

namespace kiln::broker {

class ToolRelay;

class WsSession : public WebSocketHandler, public std::enable_shared_from_this<WsSession> {
 public:
  static constexpr size_t kMaxQueued = 16;
  static constexpr size_t kMaxQueuedBytes = 256u << 10;
  static constexpr size_t kMaxRefBytes = 128;

  struct Deps {
    ExecutionService* service = nullptr;
    OutputFollower* follower = nullptr;
    ToolRelay* tools = nullptr;        // null: tool_result answers UNAVAILABLE
    QuotaCounter* streams = nullptr;   // the tenant's event streams, shared with SSE
    QuotaCounter* requests = nullptr;  // the tenant's requests in progress, shared with HTTP
    // Runs a task on the work pool, queued even when the pool is full
    // (WorkPool::Post); false once the pool stopped.
    std::function<bool(std::function<void()>)> post;
  };
  struct Limits {
    double rate = 100;
    uint32_t burst = 200;
    size_t max_follows = 64;
    std::string who;  // the quota's key: the tenant, or "admin"
    size_t max_streams = 256;
    size_t max_requests = 32;
    WsFollow::Unread unread;
  };

  WsSession(Caller caller, QuotaCounter::Hold connection, Deps deps, Limits limits);

  void OnOpen(std::shared_ptr<WebSocketChannel> channel) override;
  bool OnMessage(std::string message, bool binary) override;
  void OnDrained() override;
  void OnClosed() override;

  // For WsFollow: sends a message; bytes not yet taken; a follow is over.
  void Send(std::string text, std::shared_ptr<const void> keep = nullptr);
  size_t Pending();
  void Ended(const std::string& execution_id, const WsFollow* follow);

 private:
  // A client message, checked: its type, execution id and ref.
  struct Request {
    std::string type;
    std::string execution_id;
    nlohmann::json ref;  // null when absent
    nlohmann::json body;
  };
  // A message as it arrived, waiting for the pool.
  struct Inbound {
    std::string text;
    bool binary = false;
    bool over_rate = false;  // it came faster than the rate allows
  };
  // On the pool: handles the inbox's oldest message, then posts itself
  // again while more wait.
  void HandleNext();
  void Handle(const Inbound& in);
  // `ref` is set as soon as it is known, for the error of a later check.
  common::StatusOr<Request> Parse(std::string_view message, nlohmann::json* ref) const;
  void Follow(const Request& r);
  void Unfollow(const Request& r);
  void AnswerTool(const Request& r);
  bool QueueFull() const;  // under mu_
  void Reply(nlohmann::json message, const nlohmann::json& ref);
  void Error(const common::Status& st, const std::string& execution_id, const nlohmann::json& ref);

  const Caller caller_;
  const Deps deps_;
  const Limits limits_;
  std::mutex mu_;
  QuotaCounter::Hold connection_;                             // guarded by mu_
  std::shared_ptr<WebSocketChannel> channel_;                 // guarded by mu_; null once closed
  std::map<std::string, std::shared_ptr<WsFollow>> follows_;  // guarded by mu_
  TokenBucket bucket_;                                        // guarded by mu_
  std::deque<Inbound> inbox_;                                 // guarded by mu_
  size_t inbox_bytes_ = 0;                                    // guarded by mu_
  bool handling_ = false;  // a HandleNext() is posted or running; guarded by mu_
  bool held_ = false;      // reads wait for ResumeReads(); guarded by mu_
  bool closed_ = false;    // guarded by mu_
};

}  // namespace kiln::broker
