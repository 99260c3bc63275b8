// WorkerLoop: the worker's single event loop. It talks to every broker
// (BrokerLink), hands Execute/Cancel to the Executor, sends back what job
// threads post on the EventQueue, heartbeats, and drains on request.
//
//   WorkerLoop loop(config, &ctx, &executor, &events, layers, metrics);
//   loop.Run(stop_fd);    // returns after a drain (stop_fd readable) completes
//
// Incoming messages go through one table (type -> handler). Everything a job
// sends goes through the Outbox: Results first, to the broker the job came
// from or to any registered broker if that one is gone, kept until a broker
// acknowledges them (ResultAck) and sent again after a registration or a
// timeout; output chunks after them, per job and bounded. Every Register
// carries this process's incarnation and the jobs it holds (running, or with
// a Result not yet acknowledged), so a broker that sees the worker again
// loses only what the worker no longer has. A silent broker keeps its link
// and its queue; it is sent Register only when it says it does not know the
// worker (BrokerLink). Draining: the worker tells every
// broker it takes no new jobs (heartbeat draining=true), waits for running
// jobs and for their Results to be acknowledged, up to drain_timeout_ms (then
// cancels what still runs), then sends Disconnect. Everything here runs on
// the thread that calls Run().
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "common/protocol/messages.hpp"
#include "worker/config.hpp"
#include "worker/executor/event_queue.hpp"
#include "worker/executor/executor.hpp"
#include "worker/link/broker_link.hpp"
#include "worker/link/outbox.hpp"
#include "worker/runtimes/inventory.hpp"

namespace kiln::worker {

class WorkerMetrics;

// 16 random bytes (getrandom) as 32 hex digits: Register.incarnation.
std::string NewIncarnation();

class WorkerLoop {
 public:
  // `metrics` is optional and outlives the loop.
  WorkerLoop(const WorkerConfig& config, zmq::context_t* ctx, Executor* executor,
             EventQueue* events, std::vector<std::string> sandbox_layers,
             runtimes::RuntimeOffer offer, WorkerMetrics* metrics = nullptr);

  // Runs until stop_fd becomes readable and the drain has finished.
  void Run(int stop_fd);

 private:
  using Handler = void (WorkerLoop::*)(BrokerLink& link, common::protocol::Message& m);

  // The links as the Outbox sees them (by endpoint).
  class OutboxLinks final : public Outbox::Links {
   public:
    explicit OutboxLinks(const std::vector<std::unique_ptr<BrokerLink>>* links) : links_(links) {}
    bool Registered(const std::string& broker) const override;
    std::vector<std::string> RegisteredBrokers() const override;
    bool Send(const std::string& broker, const common::protocol::Message& m) override;

   private:
    BrokerLink* Find(const std::string& endpoint) const;
    const std::vector<std::unique_ptr<BrokerLink>>* links_;
  };

  void OnRegisterAck(BrokerLink& link, common::protocol::Message& m);
  void OnHeartbeat(BrokerLink& link, common::protocol::Message& m);
  void OnExecute(BrokerLink& link, common::protocol::Message& m);
  void OnCancel(BrokerLink& link, common::protocol::Message& m);
  void OnCloseSession(BrokerLink& link, common::protocol::Message& m);
  void OnDisconnect(BrokerLink& link, common::protocol::Message& m);
  void OnResultAck(BrokerLink& link, common::protocol::Message& m);
  void OnToolResult(BrokerLink& link, common::protocol::Message& m);
  void OnUnexpected(BrokerLink& link, common::protocol::Message& m);

  // Moves what job threads posted into the Outbox.
  void TakeEvents();
  // TakeEvents, then sends what the links take now.
  void SendEvents();
  void Tick();
  common::protocol::Heartbeat MakeHeartbeat() const;
  // The Register for the broker at `endpoint`, built at each send.
  common::protocol::Register MakeRegister(const std::string& endpoint);

  const WorkerConfig& config_;
  Executor* executor_;
  EventQueue* events_;
  const std::string incarnation_;
  common::protocol::Register register_base_;  // the fields that never change
  std::vector<std::unique_ptr<BrokerLink>> links_;
  OutboxLinks outbox_links_{&links_};
  Outbox outbox_;
  std::map<common::protocol::MessageType, Handler> handlers_;
  bool draining_ = false;
  std::chrono::steady_clock::time_point next_housekeeping_{};  // once a second
};

}  // namespace kiln::worker
