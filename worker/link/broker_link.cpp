#include "worker/link/broker_link.hpp"

#include "common/log/logging.hpp"
#include "common/protocol/codec.hpp"

namespace kiln::worker {

namespace protocol = common::protocol;

namespace {
const common::SubsystemLog kLog("link");
}  // namespace

BrokerLink::BrokerLink(zmq::context_t* ctx, std::string endpoint, protocol::Register reg,
                       std::chrono::milliseconds interval, uint32_t liveness)
    : ctx_(ctx),
      endpoint_(std::move(endpoint)),
      reg_(std::move(reg)),
      interval_(interval),
      liveness_(liveness),
      backoff_(interval) {}

void BrokerLink::Connect(Clock::time_point now) {
  if (socket_) {
    // A reconnect after silence: wait longer each time, up to 32 intervals.
    backoff_ = std::min(backoff_ * 2, interval_ * 32);
  }
  socket_.reset();
  socket_.emplace(*ctx_, zmq::socket_type::dealer);
  socket_->set(zmq::sockopt::routing_id, reg_.worker_id);
  socket_->set(zmq::sockopt::linger, 0);
  socket_->set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(protocol::kMaxMessageBytes));
  socket_->set(zmq::sockopt::reconnect_ivl, 100);
  socket_->set(zmq::sockopt::reconnect_ivl_max, 2000);
  socket_->connect(endpoint_);
  registered_ = false;
  last_heard_ = now + backoff_ - interval_;  // count silence from now (plus backoff)
  next_heartbeat_ = now + interval_;
  Send(reg_);
}

bool BrokerLink::Send(const protocol::Message& m) {
  if (!socket_) return false;
  std::string bytes = protocol::Encode(m);
  try {
    return socket_->send(zmq::buffer(bytes), zmq::send_flags::dontwait).has_value();
  } catch (const zmq::error_t& e) {
    kLog.Warn({}, "send to broker {} failed: {}", endpoint_, e.what());
    return false;
  }
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

void BrokerLink::OnRegistered(const protocol::RegisterAck& ack, Clock::time_point now) {
  registered_ = true;
  broker_id_ = ack.broker_id;
  backoff_ = interval_;
  last_heard_ = now;
}

void BrokerLink::Reset(Clock::time_point now) {
  registered_ = false;
  last_heard_ = now;
  Send(reg_);
}

bool BrokerLink::Silent(Clock::time_point now) const {
  return now - last_heard_ > interval_ * liveness_;
}

}  // namespace kiln::worker
