// RogueWorker: a peer on a broker's worker endpoint that speaks the worker
// protocol by hand, for tests of what the broker refuses (docs/security.md,
// "Worker links"); and NewKeyFiles, a CURVE key pair written for a test.
//
//   RogueWorker rogue(endpoint, key, broker_public);     // CURVE; or plain
//   rogue.Send(RogueRegistration("w1", {"python"}));
//   std::vector<protocol::Message> got = rogue.Drain(500ms);
//
// The rogue owns its ZeroMQ context, so it may be built inside another
// network namespace (its I/O threads start on the constructing thread's
// namespace). One thread.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "common/curve/curve_keys.hpp"
#include "common/protocol/messages.hpp"

namespace kiln::testing {

class RogueWorker {
 public:
  // `own` and `broker_public`: CURVE; neither: plain text.
  explicit RogueWorker(const std::string& endpoint,
                       const std::optional<common::CurveKeyPair>& own = std::nullopt,
                       const std::string& broker_public = "");

  void Send(const common::protocol::Message& m);
  // Everything that arrives within `wait`; heartbeats meanwhile while it is
  // registered (as a worker must, or it is declared dead).
  std::vector<common::protocol::Message> Drain(std::chrono::milliseconds wait);

 private:
  zmq::context_t ctx_;
  zmq::socket_t socket_;
  bool registered_ = false;
};

// A registration as a worker would send it.
common::protocol::Register RogueRegistration(const std::string& id,
                                             std::vector<std::string> runtimes,
                                             uint32_t slots = 64);
bool HasMessage(const std::vector<common::protocol::Message>& got,
                common::protocol::MessageType type);

// Writes <dir>/<name>.key and .pub; throws std::runtime_error on failure.
common::CurveKeyPair NewKeyFiles(const std::string& dir, const std::string& name);

}  // namespace kiln::testing
