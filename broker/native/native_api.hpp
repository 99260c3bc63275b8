// NativeApi: the broker's native client front end — a ZeroMQ ROUTER speaking
// the client protocol (common/protocol/client_messages.hpp, docs/protocol.md
// "Client protocol") for clients that need the highest rate.
//
//   ASSIGN_OR_RETURN(auto native, NativeApi::Create(config, &ctx, &service, &follower, &unread));
//   std::jthread t([&](std::stop_token st) { native->Run(st); });
//
// Requests: submit, cancel and get (served by ExecutionService, as the HTTP
// API's are), subscribe (stored output, then live output, then exactly one
// result). Every reply echoes the request's
// request_id, so a DEALER may keep many requests in flight. A frame that does
// not decode is answered with an INVALID_REQUEST error and changes nothing.
//
// Connections are guarded (ClientConnections, docs/protocol.md
// "Connections"): broker.clients.max_connections and
// max_connections_per_address, and a connection that sends no request with a
// valid token within auth_timeout_ms, or kMaxBadFrames failed requests before
// one, is closed. A tenant holds at most TenantMaxSubscriptions open
// subscriptions on this broker (more answer RATE_LIMITED), and the broker
// kMaxSubscriptions (more answer LIMIT_EXCEEDED).
//
// Subscriptions are NativeSubscriptions fed by the broker's shared
// OutputFollower; their frames come back to the loop through a NativeOutbox.
// Nothing is buffered without bound for a client that does not read: every
// frame is handed to ZeroMQ as an OwnedFrame, so the broker knows when it is
// written; the ROUTER's pipe to a client holds kClientHwm frames, what does
// not fit waits in the loop per client; a subscription's frames, wherever
// they wait, count against its NativeSubscription::kMaxBuffered, which stops
// the follower for it; other replies count against kMaxPendingReplyBytes
// while they wait here, past which they are dropped; a record (a get's or
// cancel's answer, a subscription's result) is charged to the tenant's
// UnreadBudget until written, and one that does not fit answers
// RATE_LIMITED (a subscription's result waits instead). A client with frames
// in ZeroMQ that has taken none for broker.clients.write_timeout_ms is
// closed; a client found gone has its subscriptions ended.
//
// Threads: Run() owns the ROUTER, decodes and authenticates every frame and
// holds every client's and subscription's state. The requests that call
// Redis (submit, subscribe, cancel, get, tool answers) run on a pool of
// broker.clients.threads, so one client's round trips do not queue the
// others'; their replies and state changes come back through the
// NativeOutbox. A tenant has at most its max_requests on the pool at once
// (as over HTTP): its further requests wait here in order, up to
// kMaxWaitingRequests or kMaxWaitingBytes (more answer RATE_LIMITED), so
// one tenant's burst holds no more of the pool than that. At most
// kMaxQueuedRequests wait for a pool thread (more answer UNAVAILABLE).
// Create() on any thread, then Run() on one.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "broker/config.hpp"
#include "broker/http/work_pool.hpp"
#include "broker/native/client_connections.hpp"
#include "broker/native/native_subscription.hpp"
#include "broker/service/execution_service.hpp"
#include "broker/stream/output_follower.hpp"
#include "common/protocol/client_messages.hpp"
#include "common/status.hpp"

namespace kiln::broker {

class ToolRelay;

class BrokerMetrics;

class NativeApi {
 public:
  using Clock = std::chrono::steady_clock;
  // Most subscriptions followed at once (more answer LIMIT_EXCEEDED).
  static constexpr size_t kMaxSubscriptions = 10000;
  // Failed requests (undecodable, wrong part count, a reply type, a wrong
  // token) a connection may send before its first valid one.
  static constexpr uint32_t kMaxBadFrames = 8;

  // Frames the ROUTER queues for one client before a send would block.
  static constexpr int kClientHwm = 64;
  // Frames libzmq reads ahead from one client before TCP pushes back.
  static constexpr int kClientRcvHwm = 16;
  // A frame's bytes beyond its request JSON (token, ids, MessagePack framing).
  static constexpr size_t kFrameOverhead = 128u << 10;
  // Plain replies (not subscription frames) kept for a client whose pipe is full.
  static constexpr size_t kMaxPendingReplyBytes = 1u << 20;
  // Requests waiting for a pool thread; more answer UNAVAILABLE.
  static constexpr size_t kMaxQueuedRequests = 1024;
  // A tenant's requests waiting for its max_requests to come down; more
  // answer RATE_LIMITED.
  static constexpr size_t kMaxWaitingRequests = 1024;
  static constexpr size_t kMaxWaitingBytes = 16u << 20;

  // Binds config.native.endpoint (which must not be empty).
  static common::StatusOr<std::unique_ptr<NativeApi>> Create(
      const BrokerConfig& config, zmq::context_t* ctx, ExecutionService* service,
      OutputFollower* follower, UnreadBudget* unread, BrokerMetrics* metrics = nullptr);
  ~NativeApi();
  NativeApi(const NativeApi&) = delete;
  NativeApi& operator=(const NativeApi&) = delete;

  // The endpoint actually bound (a port 0 or `*` resolved).
  const std::string& endpoint() const { return endpoint_; }
  // Where tool answers go (ToolAnswer); without one they are refused
  // UNAVAILABLE. Before Run().
  void SetToolRelay(ToolRelay* relay) { tools_ = relay; }
  // Serves until `stop` is requested.
  void Run(std::stop_token stop);

 private:
  enum class SendResult { kSent, kFull, kGone };
  struct Pending {
    std::deque<NativeOutbox::Item> items;
    size_t reply_bytes = 0;  // of plain replies in `items`
  };

  struct Client {
    std::shared_ptr<ClientBacklog> backlog = std::make_shared<ClientBacklog>();
    int fd = -1;  // the connection its last request came from (-1: unknown)
  };

  NativeApi(const BrokerConfig& config, zmq::context_t* ctx, ExecutionService* service,
            OutputFollower* follower, UnreadBudget* unread, BrokerMetrics* metrics);

  // Loop thread. `fd` is the connection a frame came from (-1: unknown).
  void HandleFrame(const std::string& identity, int fd, std::string_view frame);
  // A request for the pool: `serve` runs there; `refused` runs on the loop
  // if it never starts (after its error was answered).
  struct Request {
    std::string identity;
    uint64_t request_id = 0;
    Caller caller;
    size_t bytes = 0;  // its frame's
    std::function<void()> serve;
    std::function<void()> refused;
  };
  struct TenantRequests {
    uint32_t running = 0;  // on the pool
    std::deque<Request> waiting;
    size_t waiting_bytes = 0;
  };
  // Starts `r` on the pool, or queues it behind the caller's requests in
  // progress, or refuses it.
  void Post(Request r);
  void Start(TenantRequests& t, Request r);
  // Loop thread: a request of `who` ended; its next waiting one starts.
  void Done(const std::string& who);
  // Submit and subscribe: what must happen on the loop before the pool.
  void OnSubmit(const std::string& identity, const Caller& caller,
                const common::protocol::client::Submit& m);
  // Pool thread: the submit's Redis part, then the subscription (if any)
  // handed to the loop.
  void ServeSubmit(const std::string& identity, const Caller& caller,
                   const common::protocol::client::Submit& m);
  // Submits m's job and fills `accepted` (id and status). A job the policy
  // blocked is an error with its id in accepted->id.
  common::Status Admit(const Caller& caller, const common::protocol::client::Submit& m,
                       common::protocol::client::Accepted* accepted);
  void OnSubscribe(const std::string& identity, const Caller& caller,
                   const common::protocol::client::Subscribe& m);
  void ServeSubscribe(const std::string& identity, const Caller& caller,
                      const common::protocol::client::Subscribe& m);
  void OnCancel(const std::string& identity, const Caller& caller,
                const common::protocol::client::Cancel& m);
  void OnGet(const std::string& identity, const Caller& caller,
             const common::protocol::client::Get& m);
  void OnToolAnswer(const std::string& identity, const Caller& caller,
                    const common::protocol::client::ToolAnswer& m);
  // Answers with a record, charged to the caller's UnreadBudget (over it:
  // RATE_LIMITED instead).
  void SendRecord(const std::string& identity, const Caller& caller, uint64_t request_id,
                  const JobRecord& record);
  size_t UnreadLimit(const std::string& tenant) const;
  void Send(const std::string& identity, const common::protocol::client::Message& m);
  void SendFrame(const std::string& identity, std::string_view frame);
  void SendError(const std::string& identity, uint64_t request_id, const common::Status& st,
                 const std::string& id = "");
  // Counts one subscription against the broker's and the caller's tenant's
  // limits, before anything is done for it; Release undoes it.
  common::Status Reserve(const Caller& caller);
  void Release(const std::string& tenant);
  // Hands a reserved subscription to the follower.
  void Follow(const std::string& identity, const std::string& tenant, uint64_t request_id,
              const std::string& job_id, uint64_t from_seq);
  // Sends a frame now, or after the frames already waiting for its client.
  // From a pool thread: queued for the loop, which does that.
  void Deliver(NativeOutbox::Item item);
  // On kSent the item's frame and charge have gone to ZeroMQ.
  SendResult TrySend(NativeOutbox::Item& item);
  // Sends what waits for clients whose pipes have room again.
  void FlushPending();
  // A subscription's final frame left for its client: it is over.
  void Delivered(const std::string& identity, const std::shared_ptr<NativeSubscription>& from);
  // Closes clients that hold unread frames and took none for the write
  // timeout; forgets clients with nothing left here.
  void SweepClients(Clock::time_point now);
  // The client is gone: its subscriptions end, its waiting frames go.
  void ClientGone(const std::string& identity);

  const BrokerConfig& config_;
  zmq::context_t* ctx_;
  ExecutionService* service_;
  ToolRelay* tools_ = nullptr;
  BrokerMetrics* metrics_;  // may be null
  OutputFollower* follower_;
  UnreadBudget* unread_;
  zmq::socket_t router_;
  std::string endpoint_;
  std::unique_ptr<ClientConnections> connections_;  // after router_: it monitors router_
  // Shared with the frames in ZeroMQ, whose release may come after this.
  std::shared_ptr<NativeOutbox> outbox_ = std::make_shared<NativeOutbox>();

  std::thread::id loop_thread_;     // set by Run()
  std::unique_ptr<WorkPool> pool_;  // stopped first in the destructor

  // Loop thread only.
  std::map<std::string, TenantRequests, std::less<>> requests_;  // by tenant ("admin")
  std::map<std::string, Pending> pending_;                       // by client identity
  std::map<std::string, Client> clients_;                        // by client identity
  Clock::time_point next_client_sweep_;
  std::multimap<std::string, std::shared_ptr<NativeSubscription>> subs_;  // by client identity
  size_t active_ = 0;  // reserved subscriptions (followed, or about to be)
  std::map<std::string, size_t, std::less<>> tenant_active_;  // active_ per tenant
};

}  // namespace kiln::broker
