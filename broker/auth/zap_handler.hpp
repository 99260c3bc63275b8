// ZapHandler: the broker's answer to ZeroMQ's authentication requests (ZAP,
// RFC 27) for CURVE handshakes on the worker endpoint: a client key in the
// WorkerKeyring is let in, with its Z85 public key as the connection's
// User-Id (every message it sends carries it); any other is refused before a
// single message of its reaches the broker.
//
//   ASSIGN_OR_RETURN(auto zap, ZapHandler::Create(&ctx, &ring, metrics));  // before any bind
//   zmq::pollitem_t item{zap->socket().handle(), 0, ZMQ_POLLIN, 0};
//   if (item.revents & ZMQ_POLLIN) zap->Serve();                          // the gateway's loop
//
// libzmq asks the handler bound at inproc://zeromq.zap.01 in the socket's
// context; with none bound it would let every CURVE client in, so the
// handler is created before the worker endpoint binds and outlives it.
// The native client endpoint's CURVE (encryption only) shares the context:
// its domain is let in with any key, as tokens authenticate clients. Requests
// of another domain or mechanism are refused. Belongs to the WorkerGateway's
// thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <zmq.hpp>

#include "broker/auth/worker_keyring.hpp"
#include "common/status.hpp"

namespace kiln::broker {

class BrokerMetrics;

// The ZAP domains of the worker and the native client endpoints.
inline constexpr const char* kWorkerZapDomain = "kiln-workers";
inline constexpr const char* kClientZapDomain = "kiln-clients";

class ZapHandler {
 public:
  static common::StatusOr<std::unique_ptr<ZapHandler>> Create(zmq::context_t* ctx,
                                                              WorkerKeyring* keyring,
                                                              BrokerMetrics* metrics);
  zmq::socket_t& socket() { return socket_; }
  // Answers every waiting request; never blocks.
  void Serve();
  uint64_t refused() const { return refused_; }

 private:
  ZapHandler(zmq::socket_t socket, WorkerKeyring* keyring, BrokerMetrics* metrics)
      : socket_(std::move(socket)), keyring_(keyring), metrics_(metrics) {}
  void Answer(const std::string& request_id, bool ok, const std::string& text,
              const std::string& user_id);

  zmq::socket_t socket_;
  WorkerKeyring* keyring_;
  BrokerMetrics* metrics_;
  uint64_t refused_ = 0;
  std::chrono::steady_clock::time_point next_refresh_{};  // of the keyring, for an unknown key
};

}  // namespace kiln::broker
