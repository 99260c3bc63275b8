// BrokerLink: the worker's connection to one broker (a ZeroMQ DEALER), with
// the liveness bookkeeping of the Paranoid Pirate pattern.
//
//   BrokerLink link(&ctx, "tcp://10.0.0.5:5555", reg, interval, liveness);
//   link.Connect(now);                 // DEALER + Register
//   if (link.Silent(now)) link.Connect(now);   // broker gone: start afresh
//
// The broker is alive while anything arrives from it; after interval x
// liveness of silence the link drops its socket (discarding queued messages)
// and registers again, with a backoff that doubles up to 32 intervals.
// Belongs to the worker's event loop thread.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <zmq.hpp>

#include "common/protocol/messages.hpp"

namespace kiln::worker {

class BrokerLink {
 public:
  using Clock = std::chrono::steady_clock;

  BrokerLink(zmq::context_t* ctx, std::string endpoint, common::protocol::Register reg,
             std::chrono::milliseconds interval, uint32_t liveness);

  const std::string& endpoint() const { return endpoint_; }
  zmq::socket_t& socket() { return *socket_; }
  bool connected() const { return socket_.has_value(); }
  bool registered() const { return registered_; }
  const std::string& broker_id() const { return broker_id_; }

  // (Re)creates the socket and sends Register.
  void Connect(Clock::time_point now);
  bool Send(const common::protocol::Message& m);
  // Receives one message without blocking; nullopt when none is waiting.
  // Undecodable frames are logged and skipped.
  std::optional<common::protocol::Message> Receive();

  void OnHeard(Clock::time_point now) { last_heard_ = now; }
  void OnRegistered(const common::protocol::RegisterAck& ack, Clock::time_point now);
  // Forget the registration (the broker asked us to register again).
  void Reset(Clock::time_point now);

  bool HeartbeatDue(Clock::time_point now) const { return now >= next_heartbeat_; }
  void HeartbeatSent(Clock::time_point now) { next_heartbeat_ = now + interval_; }
  // True when the broker has been silent too long and a reconnect is due.
  bool Silent(Clock::time_point now) const;

 private:
  zmq::context_t* ctx_;
  std::string endpoint_;
  common::protocol::Register reg_;
  std::chrono::milliseconds interval_;
  uint32_t liveness_;
  std::optional<zmq::socket_t> socket_;
  bool registered_ = false;
  std::string broker_id_;
  Clock::time_point last_heard_;
  Clock::time_point next_heartbeat_;
  std::chrono::milliseconds backoff_;
};

}  // namespace kiln::worker
