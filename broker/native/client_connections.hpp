// ClientConnections: the I/O shell around ConnectionGuard for the native
// client ROUTER. It watches the ROUTER's connections through a ZeroMQ socket
// monitor (ACCEPTED and DISCONNECTED events carry the connection's fd), tells
// which connection sent a message (ZMQ_SRCFD), and closes what the guard
// names: shutdown(fd, SHUT_RDWR), never close() (libzmq owns the fd and tears
// the connection down itself once it reads EOF), and only after fstat,
// getsockname and getpeername show the fd still is the connection the guard
// knows (fd numbers are reused).
//
//   ASSIGN_OR_RETURN(auto conns, ClientConnections::Create(ctx, router, limits, metrics));
//   poll {router, conns->monitor()}; conns->DrainEvents(); int fd = conns->SourceOf(msg);
//
// Threads: the thread that owns the ROUTER (NativeApi's loop), for every
// method; Create() on any thread before that loop starts.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <zmq.hpp>

#include "broker/native/connection_guard.hpp"
#include "common/status.hpp"

namespace kiln::broker {

class BrokerMetrics;

class ClientConnections {
 public:
  using Clock = ConnectionGuard::Clock;

  // Starts monitoring `router` (bound or not yet bound). `metrics` may be null.
  static common::StatusOr<std::unique_ptr<ClientConnections>> Create(zmq::context_t* ctx,
                                                                     zmq::socket_t& router,
                                                                     ConnectionLimits limits,
                                                                     BrokerMetrics* metrics);
  ~ClientConnections();
  ClientConnections(const ClientConnections&) = delete;
  ClientConnections& operator=(const ClientConnections&) = delete;
  ClientConnections(ClientConnections&&) = delete;
  ClientConnections& operator=(ClientConnections&&) = delete;

  // The monitor's socket, to poll for ZMQ_POLLIN next to the ROUTER.
  zmq::socket_t& monitor() { return monitor_; }
  // Handles the connection events waiting (accepts over a limit are closed).
  void DrainEvents();
  // The fd of the connection `part` (a received message part) came from,
  // or -1 when unknown (not from a TCP or IPC connection, or already gone).
  int SourceOf(const zmq::message_t& part);
  // What the request from `fd` turned out to be (-1: ignored).
  void Authenticated(int fd);
  void BadFrame(int fd);
  // Closes `fd`: its client holds frames it does not read (NativeApi's
  // write timeout).
  void CloseStalled(int fd) { Close(fd, CloseReason::kStalled); }
  // Closes connections past their auth timeout and forgets fds that have gone
  // without an event. Call every loop turn.
  void Tick(Clock::time_point now);
  // How long the loop may sleep before Tick has work, at most `cap`.
  std::chrono::milliseconds UntilDue(Clock::time_point now, std::chrono::milliseconds cap) const;

  size_t size() const { return guard_.size(); }

 private:
  ClientConnections(ConnectionLimits limits, BrokerMetrics* metrics);

  void OnAccepted(int fd);
  void OnDisconnected(int fd);
  void Close(int fd, CloseReason reason);
  void Sweep();
  void Publish();

  ConnectionGuard guard_;
  BrokerMetrics* metrics_;  // may be null
  void* router_ = nullptr;  // the monitored ROUTER (not owned; outlives this)
  zmq::socket_t monitor_;   // PAIR connected to the ROUTER's monitor
  Clock::time_point next_sweep_;
};

}  // namespace kiln::broker
