// BrokerLink: the worker's connection to one broker (a ZeroMQ DEALER), with
// the liveness bookkeeping of the Paranoid Pirate pattern.
//
//   BrokerLink link(&ctx, "tcp://10.0.0.5:5555", curve_keys, [&] { return MakeRegister(); },
//                   interval, liveness);
//   link.Connect(now);                          // DEALER + Register
//   if (link.Silent(now)) link.OnSilence();     // stop routing to it; keep the socket
//
// The link keeps one socket for its whole life. ZeroMQ reconnects TCP by
// itself (reconnect_ivl) and, with ZMQ_IMMEDIATE off, keeps every whole
// message queued for the endpoint across disconnects and delivers it in order
// once a connection is up again: a paused broker (SIGSTOP) gets what it was
// sent, and a broker restarted on the same endpoint is reached by the same
// socket. Only what was already written to a connection that then broke is
// lost (the Outbox resends Results until they are acknowledged).
//
// States: registering (a Register is on its way) -> registered (RegisterAck)
// -> silent (nothing heard for interval x liveness: the Outbox routes around
// it). A silent broker that speaks again with anything but Disconnect still
// knows the worker (it was paused or cut off): the link is registered again
// without a new Register. A Register is sent only when the broker does not
// know the worker: at the start, and when it answers with Disconnect ("register
// again": it restarted, or declared the worker dead). Never on silence: a
// Register queued behind a paused broker arrives after the broker has resumed
// and sent new jobs, and its held_jobs, built before those arrived, would make
// the broker end them as lost. For the same reason a Disconnect that arrives
// while a Register is on its way is ignored (it answers a heartbeat sent
// before the Register), unless the connection broke since that Register was
// queued (then it may be lost; a socket monitor tells). The Register is built
// at each send by `make_register` (held_jobs change).
//
// The socket sets no routing id: the broker knows a worker by the connection
// it registered on, and a new connection registers again. With CURVE keys
// the connection is encrypted and the broker checks the worker's key before
// anything else passes (docs/security.md, "Worker links").
//
// Sends never block: the send queue holds kSendHighWater messages, past
// which Send returns false and the link is `blocked()` until the loop sees
// the socket writable again (Unblock). Belongs to the worker's event loop
// thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <zmq.hpp>

#include "common/protocol/messages.hpp"

namespace kiln::worker {

// The CURVE keys of a link (Z85); all empty: plain text, no authentication.
struct LinkKeys {
  std::string broker_public;
  std::string worker_public;
  std::string worker_secret;
  bool curve() const { return !broker_public.empty(); }
};

class BrokerLink {
 public:
  using Clock = std::chrono::steady_clock;
  using MakeRegister = std::function<common::protocol::Register()>;

  // Messages ZeroMQ queues for the broker before Send says "full" (it may
  // take fewer, and the kernel's TCP buffers hold more). Small, so that what
  // waits for a slow broker waits in the Outbox, where Results go before
  // output chunks, rather than in a FIFO no one can reorder.
  static constexpr int kSendHighWater = 32;

  enum class State { kRegistering, kRegistered, kSilent };

  BrokerLink(zmq::context_t* ctx, std::string endpoint, LinkKeys keys, MakeRegister make_register,
             std::chrono::milliseconds interval, uint32_t liveness);

  const std::string& endpoint() const { return endpoint_; }
  zmq::socket_t& socket() { return *socket_; }
  bool connected() const { return socket_.has_value(); }
  State state() const { return state_; }
  bool registered() const { return state_ == State::kRegistered; }
  const std::string& broker_id() const { return broker_id_; }

  // Creates the socket (and its monitor) and sends Register. Once.
  void Connect(Clock::time_point now);
  // False when the message could not be queued now (blocked, or an error).
  bool Send(const common::protocol::Message& m);
  // Receives one message without blocking; nullopt when none is waiting.
  // Undecodable frames are logged and skipped.
  std::optional<common::protocol::Message> Receive();

  // A Send found the queue full: the loop polls for writability and then
  // calls Unblock.
  bool blocked() const { return blocked_; }
  void Unblock() { blocked_ = false; }
  // Sends a Register that could not be queued earlier; call every turn.
  void RetryRegister();

  // Anything arrived from the broker. True when it brought a silent link
  // back (registered again, without a Register).
  bool OnHeard(Clock::time_point now, common::protocol::MessageType type);
  void OnRegistered(const common::protocol::RegisterAck& ack, Clock::time_point now);
  // The broker asked us to register again (Disconnect): sends Register,
  // unless one is already on its way. True when it sent (or owes) one.
  bool Reset(Clock::time_point now);

  bool HeartbeatDue(Clock::time_point now) const { return now >= next_heartbeat_; }
  void HeartbeatSent(Clock::time_point now);
  // True when a registered broker has been silent for interval x liveness.
  bool Silent(Clock::time_point now) const;
  // Stops counting the broker as registered; heartbeats go on, and what is
  // queued for it stays queued.
  void OnSilence() { state_ = State::kSilent; }

  // Connections to the broker that broke so far (from the socket's monitor;
  // 0 without one).
  uint64_t Disconnects() {
    DrainMonitor();
    return disconnects_;
  }

  // Closes the socket, leaving ZeroMQ up to `linger` to deliver what is
  // queued (the context's destruction waits that long at most).
  void Close(std::chrono::milliseconds linger);

 private:
  void SendRegister();
  // Reads the monitor's events; notes a broken connection.
  void DrainMonitor();

  zmq::context_t* ctx_;
  std::string endpoint_;
  LinkKeys keys_;
  MakeRegister make_register_;
  std::chrono::milliseconds interval_;
  uint32_t liveness_;
  std::optional<zmq::socket_t> socket_;
  std::optional<zmq::socket_t> monitor_;  // ZMQ_EVENT_DISCONNECTED of socket_
  State state_ = State::kRegistering;
  bool register_pending_ = false;  // a Register is owed: the queue was full
  // The connection broke after the last Register was queued: it may be lost.
  bool broke_since_register_ = false;
  uint64_t disconnects_ = 0;
  bool blocked_ = false;
  std::string broker_id_;
  Clock::time_point last_heard_;
  Clock::time_point next_heartbeat_;
};

}  // namespace kiln::worker
