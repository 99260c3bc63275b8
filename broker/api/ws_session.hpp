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
// Limits (each refusal is an `error` message; the connection stays): at
// most `rate`/s messages with bursts of `burst`, at most kMaxInFlight being
// handled at once, at most `max_follows` follows, each holding one of the
// tenant's `max_streams` (shared with SSE). What needs Redis (loading a
// record, taking an answer) runs on the HTTP work pool, never on the I/O
// thread.
//
// Threads: the WebSocketHandler methods on the connection's strand; the
// rest on pool threads and the follower's; all state under mu_.
#pragma once

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
  static constexpr size_t kMaxInFlight = 32;
  static constexpr size_t kMaxRefBytes = 128;

  struct Deps {
    ExecutionService* service = nullptr;
    OutputFollower* follower = nullptr;
    ToolRelay* tools = nullptr;       // null: tool_result answers UNAVAILABLE
    QuotaCounter* streams = nullptr;  // the tenant's event streams, shared with SSE
    // Runs a task on the work pool; false when the pool is full.
    std::function<bool(std::function<void()>)> post;
  };
  struct Limits {
    double rate = 100;
    uint32_t burst = 200;
    size_t max_follows = 64;
    std::string who;  // the quota's key: the tenant, or "admin"
    size_t max_streams = 256;
    WsFollow::Unread unread;
  };

  WsSession(Caller caller, QuotaCounter::Hold connection, Deps deps, Limits limits);

  void OnOpen(std::shared_ptr<WebSocketChannel> channel) override;
  void OnMessage(std::string_view message, bool binary) override;
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
  // `ref` is set as soon as it is known, for the error of a later check.
  common::StatusOr<Request> Parse(std::string_view message, nlohmann::json* ref) const;
  void Follow(const Request& r);
  void Unfollow(const Request& r);
  void AnswerTool(const Request& r);
  // Runs `fn` on the pool as one of the kMaxInFlight; false (and the error
  // sent) when it cannot.
  bool OnPool(const Request& r, std::function<void()> fn);
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
  size_t in_flight_ = 0;                                      // guarded by mu_
  bool closed_ = false;                                       // guarded by mu_
};

}  // namespace kiln::broker
