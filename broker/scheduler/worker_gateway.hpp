// WorkerGateway: the broker's worker socket and the workers' liveness, on a
// thread of its own that never waits on Redis.
//
//   ASSIGN_OR_RETURN(auto gw, WorkerGateway::Create(options, &ctx, &output, wake));
//   std::jthread io([&](std::stop_token st) { gw->Run(st); });
//   gw->Send(worker, protocol::Cancel{id});           // any thread
//   for (auto& e : gw->TakeEvents()) { ... }          // the dispatcher, after `wake`
//
// It owns the ZeroMQ ROUTER workers connect to. It answers registrations and
// heartbeats itself, beats every interval and declares a worker dead after
// interval x liveness of silence (WorkerLiveness: a pause of the broker's own
// is not counted against workers). Output chunks go to the OutputBuffer;
// Results, registrations, heartbeats and deaths become events for the
// Dispatcher, whose work touches Redis. So a slow or absent Redis, or a
// dispatcher busy storing a flood, never stops heartbeats, and a Result never
// waits in the socket behind another job's chunks.
// Every party is untrusted (docs/security.md, "Worker links"): a worker is
// known by the connection it registered on (WorkerLinks), so a message from
// a connection that has not registered is refused, and with CURVE a
// connection is let in only with an accepted key (ZapHandler), registers only
// as the worker id its key names, and loses its worker when the key is
// revoked.
// Run() belongs to one thread; Send() and TakeEvents() are thread-safe.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <variant>
#include <vector>
#include <zmq.hpp>

#include "broker/auth/zap_handler.hpp"
#include "broker/scheduler/output_buffer.hpp"
#include "broker/scheduler/worker_links.hpp"
#include "broker/scheduler/worker_liveness.hpp"
#include "common/protocol/messages.hpp"
#include "common/status.hpp"
#include "common/unique_fd.hpp"

namespace kiln::broker {

class BrokerMetrics;

struct GatewayOptions {
  std::string broker_id;
  std::string endpoint;  // e.g. tcp://127.0.0.1:5555 (port 0 or * for ephemeral)
  std::chrono::milliseconds heartbeat_interval{1000};
  uint32_t liveness = 3;
  // Results and other events waiting for the dispatcher, at most (bytes);
  // past it a Result is dropped unacknowledged and its worker sends it again.
  size_t max_event_bytes = 512u << 20;
  BrokerMetrics* metrics = nullptr;  // optional; outlives the gateway
  // CURVE: the broker's secret key (Z85) and the worker keys it accepts,
  // both or neither. Without them anyone who reaches the endpoint may
  // register (loopback development only: broker/main.cpp refuses otherwise).
  std::string curve_secret_key;
  WorkerKeyring* keyring = nullptr;  // outlives the gateway
  // A registered worker's tool call (ToolRelay::Post: must not block);
  // unset: every call is answered ToolUnavailable.
  std::function<void(const std::string& worker, common::protocol::ToolCall)> on_tool_call;
};

// What the gateway tells the dispatcher, in the order it happened.
struct WorkerRegistered {
  std::string worker;
  common::protocol::Register reg;
};
struct WorkerBeat {
  std::string worker;
  common::protocol::Heartbeat beat;
};
struct WorkerResult {
  std::string worker;
  common::protocol::Result result;
};
struct WorkerGone {
  std::string worker;
  std::string why;
  bool expired = false;  // missed its heartbeats (rather than said goodbye)
};
// An Execute could not be handed to its worker (gone, or its queue full).
struct Undeliverable {
  std::string worker;
  std::string job_id;
};
using GatewayEvent =
    std::variant<WorkerRegistered, WorkerBeat, WorkerResult, WorkerGone, Undeliverable>;

class WorkerGateway {
 public:
  static common::StatusOr<std::unique_ptr<WorkerGateway>> Create(GatewayOptions options,
                                                                 zmq::context_t* ctx,
                                                                 OutputBuffer* output,
                                                                 std::function<void()> wake);
  ~WorkerGateway();
  WorkerGateway(const WorkerGateway&) = delete;
  WorkerGateway& operator=(const WorkerGateway&) = delete;

  // The endpoint actually bound (resolves an ephemeral port).
  const std::string& endpoint() const { return bound_endpoint_; }

  // Queues a message for a worker; sent on the gateway's thread.
  void Send(std::string worker, common::protocol::Message message);
  std::deque<GatewayEvent> TakeEvents();

  // The I/O loop; on a stop request it tells every worker it is going.
  void Run(std::stop_token stop);

 private:
  using Handler = void (WorkerGateway::*)(const std::string& worker,
                                          common::protocol::Message& message);

  WorkerGateway(GatewayOptions options, std::unique_ptr<ZapHandler> zap, zmq::socket_t router,
                common::UniqueFd wake_fd, OutputBuffer* output, std::function<void()> wake);

  void ReceiveAll(WorkerLiveness::Clock::time_point now);
  void SendQueued();
  bool SendNow(const std::string& worker, const common::protocol::Message& m);
  bool SendTo(const std::string& routing, const common::protocol::Message& m);
  void Post(GatewayEvent event, size_t bytes);
  void Beat(WorkerLiveness::Clock::time_point now);
  // Re-reads the accepted keys (once a second) and ends the workers whose
  // key is no longer accepted.
  void CheckKeys(WorkerLiveness::Clock::time_point now);
  // Forgets a worker's connection and liveness, and tells the dispatcher.
  void Drop(const std::string& worker, std::string why, bool expired);
  void Refuse(const std::string& reason);

  void OnRegister(const std::string& routing, const std::string& key,
                  common::protocol::Register& reg);
  void OnUnregistered(const std::string& routing, common::protocol::MessageType type);
  void OnHeartbeat(const std::string& worker, common::protocol::Message& m);
  void OnOutputChunk(const std::string& worker, common::protocol::Message& m);
  void OnResult(const std::string& worker, common::protocol::Message& m);
  void OnToolCall(const std::string& worker, common::protocol::Message& m);
  void OnDisconnect(const std::string& worker, common::protocol::Message& m);
  void OnUnexpected(const std::string& worker, common::protocol::Message& m);

  GatewayOptions options_;
  std::unique_ptr<ZapHandler> zap_;  // declared first: outlives router_ (see ZapHandler)
  zmq::socket_t router_;
  common::UniqueFd wake_fd_;  // eventfd: Send() was called
  OutputBuffer* output_;
  std::function<void()> wake_dispatcher_;
  std::string bound_endpoint_;
  std::map<common::protocol::MessageType, Handler> handlers_;

  // Loop-owned.
  WorkerLiveness liveness_;
  WorkerLinks links_;
  WorkerLiveness::Clock::time_point next_key_check_{};
  uint64_t keys_checked_ = 0;  // the keyring generation every link was checked against
  WorkerLiveness::Clock::time_point now_{};  // of the current turn
  WorkerLiveness::Clock::time_point next_beat_{};

  // Shared.
  std::mutex mu_;
  std::deque<std::pair<std::string, common::protocol::Message>> outbox_;
  std::deque<GatewayEvent> events_;
  size_t event_bytes_ = 0;  // of events_
};

}  // namespace kiln::broker
