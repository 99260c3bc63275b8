#include "tests/support/rogue_worker.hpp"

#include <stdexcept>

#include "common/protocol/codec.hpp"

namespace kiln::testing {

namespace protocol = common::protocol;

RogueWorker::RogueWorker(const std::string& endpoint,
                         const std::optional<common::CurveKeyPair>& own,
                         const std::string& broker_public)
    : ctx_(1), socket_(ctx_, zmq::socket_type::dealer) {
  socket_.set(zmq::sockopt::linger, 0);
  if (own) {
    socket_.set(zmq::sockopt::curve_serverkey, broker_public);
    socket_.set(zmq::sockopt::curve_publickey, own->public_z85);
    socket_.set(zmq::sockopt::curve_secretkey, own->secret_z85);
  }
  socket_.connect(endpoint);
}

void RogueWorker::Send(const protocol::Message& m) {
  socket_.send(zmq::buffer(protocol::Encode(m)), zmq::send_flags::none);
}

std::vector<protocol::Message> RogueWorker::Drain(std::chrono::milliseconds wait) {
  std::vector<protocol::Message> out;
  for (auto until = std::chrono::steady_clock::now() + wait;
       std::chrono::steady_clock::now() < until;) {
    if (registered_) Send(protocol::Heartbeat{"rogue"});
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(50));
    zmq::message_t frame;
    while (socket_.recv(frame, zmq::recv_flags::dontwait)) {
      auto m =
          protocol::Decode(std::string_view(static_cast<const char*>(frame.data()), frame.size()));
      if (!m.ok()) continue;
      if (protocol::TypeOf(*m) == protocol::MessageType::kRegisterAck) registered_ = true;
      if (protocol::TypeOf(*m) == protocol::MessageType::kDisconnect) registered_ = false;
      out.push_back(std::move(*m));
    }
  }
  return out;
}

protocol::Register RogueRegistration(const std::string& id, std::vector<std::string> runtimes,
                                     uint32_t slots) {
  protocol::Register reg;
  reg.worker_id = id;
  reg.hostname = "rogue";
  reg.runtimes = std::move(runtimes);
  reg.slots = slots;
  reg.incarnation = "00000000000000000000000000000001";
  return reg;
}

bool HasMessage(const std::vector<protocol::Message>& got, protocol::MessageType type) {
  for (const auto& m : got) {
    if (protocol::TypeOf(m) == type) return true;
  }
  return false;
}

common::CurveKeyPair NewKeyFiles(const std::string& dir, const std::string& name) {
  auto kp = common::GenerateCurveKeyPair();
  if (!kp.ok()) throw std::runtime_error(kp.status().ToString());
  auto st = common::WriteCurveKeyFiles(dir, name, *kp);
  if (!st.ok()) throw std::runtime_error(st.ToString());
  return *kp;
}

}  // namespace kiln::testing
