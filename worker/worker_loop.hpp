// WorkerLoop: the worker's single event loop. It talks to every broker
// (BrokerLink), hands Execute/Cancel to the Executor, sends back what job
// threads post on the EventQueue, heartbeats, and drains on request.
//
//   WorkerLoop loop(config, &ctx, &executor, &events, layers);
//   loop.Run(stop_fd);    // returns after a drain (stop_fd readable) completes
//
// Incoming messages go through one table (type -> handler). A Result goes to
// the broker the job came from, or to any registered broker if that one is
// gone. Draining: the worker tells every broker it takes no new jobs
// (heartbeat draining=true), waits for running jobs up to drain_timeout_ms,
// then sends Disconnect. Everything here runs on the thread that calls Run().
#pragma once

#include <deque>
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

namespace kiln::worker {

class WorkerLoop {
 public:
  WorkerLoop(const WorkerConfig& config, zmq::context_t* ctx, Executor* executor,
             EventQueue* events, std::vector<std::string> sandbox_layers);

  // Runs until stop_fd becomes readable and the drain has finished.
  void Run(int stop_fd);

 private:
  using Handler = void (WorkerLoop::*)(BrokerLink& link, common::protocol::Message& m);

  void OnRegisterAck(BrokerLink& link, common::protocol::Message& m);
  void OnHeartbeat(BrokerLink& link, common::protocol::Message& m);
  void OnExecute(BrokerLink& link, common::protocol::Message& m);
  void OnCancel(BrokerLink& link, common::protocol::Message& m);
  void OnCloseSession(BrokerLink& link, common::protocol::Message& m);
  void OnDisconnect(BrokerLink& link, common::protocol::Message& m);
  void OnUnexpected(BrokerLink& link, common::protocol::Message& m);

  void SendEvents();
  void Tick();
  common::protocol::Heartbeat MakeHeartbeat() const;

  const WorkerConfig& config_;
  Executor* executor_;
  EventQueue* events_;
  std::vector<std::unique_ptr<BrokerLink>> links_;
  std::map<common::protocol::MessageType, Handler> handlers_;
  // Events no broker could take yet (all were away); sent on reconnect.
  std::deque<OutboundEvent> unsent_;
  static constexpr size_t kMaxUnsent = 100000;
  bool draining_ = false;
  std::chrono::steady_clock::time_point next_housekeeping_{};  // once a second
};

}  // namespace kiln::worker
