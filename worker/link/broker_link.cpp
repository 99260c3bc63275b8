#include "worker/link/broker_link.hpp"

#include <atomic>
#include <cstring>

#include "common/log/logging.hpp"
#include "common/protocol/codec.hpp"

namespace kiln::worker {

namespace protocol = common::protocol;

namespace {
const common::SubsystemLog kLog("link");
constexpr uint16_t kHandshakeFailures = ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                                        ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                        ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
}  // namespace

BrokerLink::BrokerLink(zmq::context_t* ctx, std::string endpoint, LinkKeys keys,
                       MakeRegister make_register, std::chrono::milliseconds interval,
                       uint32_t liveness)
    : ctx_(ctx),
      endpoint_(std::move(endpoint)),
      keys_(std::move(keys)),
      make_register_(std::move(make_register)),
      interval_(interval),
      liveness_(liveness) {}

void BrokerLink::Connect(Clock::time_point now) {
  if (socket_) return;
  socket_.emplace(*ctx_, zmq::socket_type::dealer);
  if (keys_.curve()) {
    socket_->set(zmq::sockopt::curve_serverkey, keys_.broker_public);
    socket_->set(zmq::sockopt::curve_publickey, keys_.worker_public);
    socket_->set(zmq::sockopt::curve_secretkey, keys_.worker_secret);
  }
  socket_->set(zmq::sockopt::linger, 0);
  socket_->set(zmq::sockopt::sndhwm, kSendHighWater);
  // Off (the default, stated here because the link relies on it): messages
  // queue for the endpoint while no connection is up and survive reconnects.
  socket_->set(zmq::sockopt::immediate, false);
  socket_->set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(protocol::kMaxMessageBytes));
  socket_->set(zmq::sockopt::reconnect_ivl, 100);
  socket_->set(zmq::sockopt::reconnect_ivl_max, 2000);
  // Broken connections, so that a Register that may have gone with one is
  // sent again (Reset). Without a monitor every Disconnect gets a Register.
  static std::atomic<uint64_t> monitors{0};
  const std::string monitor_at = "inproc://kiln-broker-link-monitor-" + std::to_string(monitors++);
  if (::zmq_socket_monitor(socket_->handle(), monitor_at.c_str(),
                           ZMQ_EVENT_DISCONNECTED | kHandshakeFailures) == 0) {
    monitor_.emplace(*ctx_, zmq::socket_type::pair);
    monitor_->set(zmq::sockopt::linger, 0);
    monitor_->connect(monitor_at);
  } else {
    kLog.Warn({}, "cannot monitor the connection to broker {}: {}", endpoint_,
              zmq_strerror(zmq_errno()));
  }
  socket_->connect(endpoint_);
  state_ = State::kRegistering;
  last_heard_ = now;
  next_heartbeat_ = now + interval_;
  SendRegister();
}

void BrokerLink::SendRegister() {
  DrainMonitor();  // breaks before this Register do not concern it
  broke_since_register_ = false;
  // Built now: held_jobs says what the worker holds at this moment.
  register_pending_ = blocked_ || !Send(make_register_());
}

void BrokerLink::RetryRegister() {
  if (register_pending_ && !blocked_) SendRegister();
}

void BrokerLink::DrainMonitor() {
  if (!monitor_) return;
  try {
    while (true) {
      zmq::message_t event;
      if (!monitor_->recv(event, zmq::recv_flags::dontwait)) return;
      uint16_t id = 0;
      uint32_t value = 0;
      if (event.size() >= sizeof(id) + sizeof(value)) {
        std::memcpy(&id, event.data(), sizeof(id));
        std::memcpy(&value, static_cast<const char*>(event.data()) + sizeof(id), sizeof(value));
      }
      if (id == ZMQ_EVENT_DISCONNECTED) {
        broke_since_register_ = true;
        ++disconnects_;
      } else if (id & kHandshakeFailures) {
        // Nothing else would say why the link never registers.
        static common::LogLimiter limit(/*lines=*/5, std::chrono::seconds(60));
        kLog.Warn(limit, {}, "broker {} refused the connection: {}", endpoint_,
                  id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH
                      ? "our key is not accepted there (status " + std::to_string(value) + ")"
                      : std::string("the handshake failed (CURVE keys on one side only?)"));
      }
      // The second frame (the endpoint) comes with the first.
      for (bool more = event.more(); more;) {
        zmq::message_t part;
        if (!monitor_->recv(part, zmq::recv_flags::dontwait)) break;
        more = part.more();
      }
    }
  } catch (const zmq::error_t& e) {
    kLog.Warn({}, "reading the monitor of broker {} failed: {}", endpoint_, e.what());
  }
}

void BrokerLink::HeartbeatSent(Clock::time_point now) {
  next_heartbeat_ = now + interval_;
  DrainMonitor();  // so that a refused handshake is logged while it lasts
}

bool BrokerLink::Send(const protocol::Message& m) {
  if (!socket_ || blocked_) return false;
  std::string bytes = protocol::Encode(m);
  try {
    if (socket_->send(zmq::buffer(bytes), zmq::send_flags::dontwait)) return true;
    blocked_ = true;  // EAGAIN: the queue is at its high-water mark
    return false;
  } catch (const zmq::error_t& e) {
    kLog.Warn({}, "send to broker {} failed: {}", endpoint_, e.what());
    return false;
  }
}

void BrokerLink::Close(std::chrono::milliseconds linger) {
  monitor_.reset();
  if (!socket_) return;
  socket_->set(zmq::sockopt::linger, static_cast<int>(linger.count()));
  socket_.reset();
}

std::optional<protocol::Message> BrokerLink::Receive() {
  while (socket_) {
    zmq::message_t frame;
    try {
      if (!socket_->recv(frame, zmq::recv_flags::dontwait)) return std::nullopt;
    } catch (const zmq::error_t& e) {
      kLog.Warn({}, "receive from broker {} failed: {}", endpoint_, e.what());
      return std::nullopt;
    }
    bool more = frame.more();
    const bool multipart = more;
    while (more) {
      zmq::message_t junk;
      if (!socket_->recv(junk, zmq::recv_flags::none)) break;
      more = junk.more();
    }
    if (multipart) continue;  // brokers send single frames
    auto m =
        protocol::Decode(std::string_view(static_cast<const char*>(frame.data()), frame.size()));
    if (!m.ok()) {
      // A broker (or whatever answers on its endpoint) sends these at will.
      static common::LogLimiter limit(/*lines=*/10, std::chrono::seconds(10));
      kLog.Warn(limit, {}, "bad message from broker {}: {}", endpoint_, m.status().message());
      continue;
    }
    return std::move(*m);
  }
  return std::nullopt;
}

bool BrokerLink::OnHeard(Clock::time_point now, protocol::MessageType type) {
  last_heard_ = now;
  // A broker that forgot the worker says only Disconnect; a RegisterAck has
  // its own handler.
  if (state_ != State::kSilent || type == protocol::MessageType::kDisconnect ||
      type == protocol::MessageType::kRegisterAck) {
    return false;
  }
  state_ = State::kRegistered;
  return true;
}

void BrokerLink::OnRegistered(const protocol::RegisterAck& ack, Clock::time_point now) {
  state_ = State::kRegistered;
  register_pending_ = false;
  broker_id_ = ack.broker_id;
  last_heard_ = now;
}

bool BrokerLink::Reset(Clock::time_point now) {
  last_heard_ = now;
  if (state_ == State::kRegistering) {
    if (register_pending_) return true;  // RetryRegister sends it when there is room
    DrainMonitor();
    // Our Register is queued behind what this Disconnect answered: the
    // broker reads it next. A second one could arrive after the broker has
    // sent us jobs, without them in held_jobs.
    if (monitor_ && !broke_since_register_) return false;
  }
  state_ = State::kRegistering;
  SendRegister();
  return true;
}

bool BrokerLink::Silent(Clock::time_point now) const {
  return state_ == State::kRegistered && now - last_heard_ > interval_ * liveness_;
}

}  // namespace kiln::worker
