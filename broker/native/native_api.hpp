// NativeApi: the broker's native client front end — a ZeroMQ ROUTER speaking
// the client protocol (common/protocol/client_messages.hpp, docs/protocol.md
// "Client protocol") for clients that need the highest rate.
//
//   ASSIGN_OR_RETURN(auto native, NativeApi::Create(config, &ctx, stores, &dispatcher, &waiters));
//   std::jthread t([&](std::stop_token st) { native->Run(st); });
//
// Requests: submit (the same checks and scheduling as POST /v1/executions,
// through SubmitService), subscribe (stored output, then live output, then
// exactly one result), cancel, get. Every reply echoes the request's
// request_id, so a DEALER may keep many requests in flight. A frame that does
// not decode is answered with an INVALID_REQUEST error and changes nothing.
//
// Threads: Run() owns the ROUTER and serves requests (short Redis calls) in
// the calling thread; it also runs one streamer thread that follows every
// subscription (its own Redis connection) and hands the events back to the
// loop over an inproc socket. Create() on any thread, then Run() on one.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "broker/api/submit_service.hpp"
#include "broker/config.hpp"
#include "broker/scheduler/dispatcher.hpp"
#include "broker/store/redis_connection.hpp"
#include "common/protocol/client_messages.hpp"
#include "common/status.hpp"

namespace kiln::broker {

class BrokerMetrics;

class NativeApi {
 public:
  // Most subscriptions followed at once (more answer LIMIT_EXCEEDED).
  static constexpr size_t kMaxSubscriptions = 10000;

  // Binds config.client_endpoint (which must not be empty).
  static common::StatusOr<std::unique_ptr<NativeApi>> Create(
      const BrokerConfig& config, zmq::context_t* ctx, DispatcherStores stores,
      Dispatcher* dispatcher, JobWaiters* waiters, BrokerMetrics* metrics = nullptr,
      Governance governance = {});
  ~NativeApi();
  NativeApi(const NativeApi&) = delete;
  NativeApi& operator=(const NativeApi&) = delete;

  // The endpoint actually bound (a port 0 or `*` resolved).
  const std::string& endpoint() const { return endpoint_; }
  // Serves until `stop` is requested.
  void Run(std::stop_token stop);

 private:
  struct Subscription {
    std::string identity;  // the client's routing id
    uint64_t request_id = 0;
    std::string id;
    std::string after = "0";  // last output stream entry sent
    uint64_t from_seq = 0;    // chunks below this seq are skipped (a resume)
  };

  NativeApi(const BrokerConfig& config, zmq::context_t* ctx, DispatcherStores stores,
            Dispatcher* dispatcher, JobWaiters* waiters, BrokerMetrics* metrics,
            Governance governance);

  // Loop thread.
  void HandleFrame(const std::string& identity, std::string_view frame);
  void OnSubmit(const std::string& identity, const common::protocol::client::Submit& m);
  void OnSubscribe(const std::string& identity, const common::protocol::client::Subscribe& m);
  void OnCancel(const std::string& identity, const common::protocol::client::Cancel& m);
  void OnGet(const std::string& identity, const common::protocol::client::Get& m);
  // The job if the token's tenant may see it (another tenant's is NOT_FOUND).
  common::StatusOr<JobRecord> LoadForToken(const std::string& token, const std::string& id);
  void Send(const std::string& identity, const common::protocol::client::Message& m);
  void SendFrame(const std::string& identity, std::string_view frame);
  void SendError(const std::string& identity, uint64_t request_id, const common::Status& st,
                 const std::string& id = "");
  common::Status Follow(Subscription sub);

  // Streamer thread.
  void StreamLoop(std::stop_token stop);
  // One pass over a subscription: sends new output, and the result once the
  // job has ended and every chunk was sent. True when it is finished.
  bool Step(RedisConnection* conn, zmq::socket_t& out, Subscription& sub, bool* progress,
            const std::stop_token& stop);

  const BrokerConfig& config_;
  zmq::context_t* ctx_;
  JobStore* store_;
  ScheduleStore* schedule_;
  Dispatcher* dispatcher_;
  BrokerMetrics* metrics_;  // may be null
  SubmitService submits_;
  RedisEndpoint redis_endpoint_;
  zmq::socket_t router_;
  zmq::socket_t events_;  // PULL: [identity, frame] from the streamer
  std::string endpoint_;
  std::string events_endpoint_;

  std::mutex mu_;
  std::condition_variable cv_;       // new subscriptions, stop
  std::vector<Subscription> inbox_;  // guarded by mu_
  size_t active_ = 0;                // guarded by mu_: followed + inbox
};

}  // namespace kiln::broker
