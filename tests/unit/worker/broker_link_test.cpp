// BrokerLink against a real ZeroMQ ROUTER standing in for a broker: a broker
// that goes silent (stops reading, as under SIGSTOP) or away (closes; then a
// new one binds the same endpoint) still gets, from the same DEALER, every
// message queued meanwhile, in order. A paused broker gets no Register when
// it resumes (one built during the pause would be stale); a broker that
// forgot the worker (Disconnect) gets one fresh Register with the worker's
// incarnation and the jobs it holds now, and a Register lost with a broken
// connection is sent again.
#include "worker/link/broker_link.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/protocol/codec.hpp"
#include "worker/worker_loop.hpp"

namespace kiln::worker {
namespace {

namespace protocol = common::protocol;
using namespace std::chrono_literals;
using Clock = BrokerLink::Clock;

constexpr auto kInterval = 50ms;
constexpr uint32_t kLiveness = 2;
const std::string kWorker = "worker-7";

// A broker's ROUTER socket, driven by the test.
class Router {
 public:
  Router(zmq::context_t& ctx, const std::string& endpoint, int rcvhwm = 1000, int rcvbuf = 0)
      : socket_(ctx, zmq::socket_type::router) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::rcvhwm, rcvhwm);
    if (rcvbuf > 0) socket_.set(zmq::sockopt::rcvbuf, rcvbuf);
    // The previous broker's listener closes asynchronously: retry briefly.
    for (int attempt = 0;; ++attempt) {
      try {
        socket_.bind(endpoint);
        break;
      } catch (const zmq::error_t& e) {
        if (e.num() != EADDRINUSE || attempt > 100) throw;
        std::this_thread::sleep_for(20ms);
      }
    }
    endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
  }

  const std::string& endpoint() const { return endpoint_; }

  // The next message from a worker, with the sender's routing id.
  std::optional<std::pair<std::string, protocol::Message>> Recv(std::chrono::milliseconds wait) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, wait) == 0) return std::nullopt;
    zmq::message_t id, frame;
    if (!socket_.recv(id) || !id.more() || !socket_.recv(frame)) return std::nullopt;
    auto m =
        protocol::Decode(std::string_view(static_cast<const char*>(frame.data()), frame.size()));
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    if (!m.ok()) return std::nullopt;
    last_from_ = id.to_string();
    return std::make_pair(last_from_, std::move(*m));
  }

  // To the connection the last message came from.
  void Reply(const protocol::Message& m) {
    socket_.send(zmq::buffer(last_from_), zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(protocol::Encode(m)), zmq::send_flags::none);
  }

 private:
  zmq::socket_t socket_;
  std::string endpoint_;
  std::string last_from_;
};

// Waits until the link's socket has seen its connection break.
bool AwaitDisconnect(BrokerLink& link, uint64_t before) {
  for (auto until = Clock::now() + 5s; Clock::now() < until;) {
    if (link.Disconnects() > before) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

const std::string& Incarnation() {
  static const std::string inc = NewIncarnation();
  return inc;
}

protocol::Register MakeRegister(const std::vector<std::string>& held) {
  protocol::Register reg;
  reg.worker_id = kWorker;
  reg.runtimes = {"python"};
  reg.slots = 2;
  reg.incarnation = Incarnation();
  reg.held_jobs = held;
  return reg;
}

protocol::OutputChunk Chunk(uint64_t seq, std::string data = "chunk") {
  return protocol::OutputChunk{"job-1", protocol::Stream::kStdout, seq, 0, std::move(data)};
}

// Reads the link's socket as the loop does, until a message of `type` arrives.
std::optional<protocol::Message> Await(BrokerLink& link, protocol::MessageType type) {
  auto until = Clock::now() + 5s;
  while (Clock::now() < until) {
    zmq::pollitem_t item{link.socket().handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, 20ms);
    while (auto m = link.Receive()) {
      link.OnHeard(Clock::now(), protocol::TypeOf(*m));
      if (protocol::TypeOf(*m) == type) return m;
    }
  }
  ADD_FAILURE() << "no " << protocol::TypeName(type);
  return std::nullopt;
}

// The broker's side of a registration: expects a Register from kWorker with
// `held`, and accepts it.
void ExpectRegister(Router& broker, BrokerLink& link, const std::vector<std::string>& held) {
  auto m = broker.Recv(5s);
  ASSERT_TRUE(m.has_value()) << "no Register";
  // The worker announces no routing id: the ROUTER numbers the connection
  // itself (libzmq's own ids start with a zero byte).
  ASSERT_FALSE(m->first.empty());
  EXPECT_EQ(m->first[0], '\0');
  auto* reg = std::get_if<protocol::Register>(&m->second);
  ASSERT_NE(reg, nullptr) << "got a " << protocol::TypeName(protocol::TypeOf(m->second));
  EXPECT_EQ(reg->incarnation, Incarnation());
  EXPECT_EQ(reg->held_jobs, held);
  broker.Reply(protocol::RegisterAck{"broker-1", 50, kLiveness});
  auto ack = Await(link, protocol::MessageType::kRegisterAck);
  ASSERT_TRUE(ack.has_value());
  link.OnRegistered(std::get<protocol::RegisterAck>(*ack), Clock::now());
  EXPECT_TRUE(link.registered());
}

// As the loop does: a registered broker silent for the window stops counting
// as registered; the socket, and what is queued, stay.
void WaitSilent(BrokerLink& link) {
  auto until = Clock::now() + 5s;
  while (!link.Silent(Clock::now()) && Clock::now() < until) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(link.Silent(Clock::now()));
  link.OnSilence();
  EXPECT_EQ(link.state(), BrokerLink::State::kSilent);
  EXPECT_FALSE(link.registered());
}

void ExpectChunks(Router& broker, uint64_t count) {
  for (uint64_t seq = 0; seq < count; ++seq) {
    auto m = broker.Recv(5s);
    ASSERT_TRUE(m.has_value()) << "chunk " << seq << " of " << count << " was lost";
    auto* c = std::get_if<protocol::OutputChunk>(&m->second);
    ASSERT_NE(c, nullptr) << "got a " << protocol::TypeName(protocol::TypeOf(m->second))
                          << " instead of chunk " << seq;
    EXPECT_EQ(c->seq, seq);
  }
}

TEST(Incarnation, IsSixteenRandomBytesInHex) {
  const std::string a = NewIncarnation(), b = NewIncarnation();
  EXPECT_THAT(a, ::testing::MatchesRegex("[0-9a-f]{32}"));
  EXPECT_NE(a, b);
}

TEST(BrokerLink, ABrokerRestartedOnTheSameEndpointGetsWhatWasQueuedThenOneRegister) {
  zmq::context_t ctx;
  auto first = std::make_unique<Router>(ctx, "tcp://127.0.0.1:*");
  const std::string endpoint = first->endpoint();
  std::vector<std::string> held = {"job-1"};
  BrokerLink link(
      &ctx, endpoint, {}, [&] { return MakeRegister(held); }, kInterval, kLiveness);
  link.Connect(Clock::now());
  ExpectRegister(*first, link, held);

  // The broker goes away: its connection closes.
  first.reset();
  ASSERT_TRUE(AwaitDisconnect(link, 0)) << "the DEALER never saw the broker go";
  for (uint64_t seq = 0; seq < 5; ++seq) ASSERT_TRUE(link.Send(Chunk(seq))) << seq;
  held = {"job-1", "job-2"};
  WaitSilent(link);
  ASSERT_TRUE(link.Send(protocol::Heartbeat{kWorker}));  // the loop heartbeats on

  // A new broker on the same endpoint: the same socket reaches it, with what
  // was queued, in order.
  Router second(ctx, endpoint);
  ExpectChunks(second, 5);
  auto beat = second.Recv(5s);
  ASSERT_TRUE(beat.has_value());
  EXPECT_TRUE(std::holds_alternative<protocol::Heartbeat>(beat->second));
  // It does not know the worker. It answers each heartbeat with Disconnect;
  // the first gets a Register built now, the second is ignored (it answers a
  // heartbeat sent before that Register, which the broker reads next).
  second.Reply(protocol::Disconnect{"unknown worker: register again"});
  second.Reply(protocol::Disconnect{"unknown worker: register again"});
  ASSERT_TRUE(Await(link, protocol::MessageType::kDisconnect).has_value());
  EXPECT_TRUE(link.Reset(Clock::now()));
  ASSERT_TRUE(Await(link, protocol::MessageType::kDisconnect).has_value());
  EXPECT_FALSE(link.Reset(Clock::now()));
  ExpectRegister(second, link, held);
  auto extra = second.Recv(300ms);
  EXPECT_FALSE(extra.has_value()) << "a second Register: it would be stale";
}

TEST(BrokerLink, ARegisterLostWithItsConnectionIsSentAgain) {
  zmq::context_t ctx;
  auto first = std::make_unique<Router>(ctx, "tcp://127.0.0.1:*");
  const std::string endpoint = first->endpoint();
  std::vector<std::string> held = {"job-1"};
  BrokerLink link(
      &ctx, endpoint, {}, [&] { return MakeRegister(held); }, kInterval, kLiveness);
  link.Connect(Clock::now());
  // The broker reads the Register, then dies before it answers.
  auto reg = first->Recv(5s);
  ASSERT_TRUE(reg.has_value());
  ASSERT_TRUE(std::holds_alternative<protocol::Register>(reg->second));
  first.reset();
  ASSERT_TRUE(AwaitDisconnect(link, 0));
  Router second(ctx, endpoint);
  ASSERT_TRUE(link.Send(protocol::Heartbeat{kWorker}));
  auto beat = second.Recv(5s);
  ASSERT_TRUE(beat.has_value()) << "the socket did not reach the new broker";
  ASSERT_TRUE(std::holds_alternative<protocol::Heartbeat>(beat->second))
      << "got a " << protocol::TypeName(protocol::TypeOf(beat->second));
  second.Reply(protocol::Disconnect{"unknown worker: register again"});
  ASSERT_TRUE(Await(link, protocol::MessageType::kDisconnect).has_value());
  held = {"job-3"};
  EXPECT_TRUE(link.Reset(Clock::now())) << "the connection broke after the Register";
  ExpectRegister(second, link, held);
}

TEST(BrokerLink, APausedBrokerGetsEverythingQueuedDuringItsSilenceAndNoStaleRegister) {
  zmq::context_t ctx;
  // A broker that stops reading, as one stopped with SIGSTOP: small receive
  // buffers, so the worker's own queue fills soon.
  Router broker(ctx, "tcp://127.0.0.1:*", /*rcvhwm=*/4, /*rcvbuf=*/64 << 10);
  std::vector<std::string> held = {"job-1"};
  BrokerLink link(
      &ctx, broker.endpoint(), {}, [&] { return MakeRegister(held); }, kInterval, kLiveness);
  link.Connect(Clock::now());
  ExpectRegister(broker, link, held);

  // The broker reads nothing: the link takes messages until its queue is full.
  const std::string data(16 << 10, 'x');
  uint64_t accepted = 0;
  for (auto until = Clock::now() + 20s; Clock::now() < until;) {
    if (link.Send(Chunk(accepted, data))) {
      ++accepted;
      continue;
    }
    ASSERT_TRUE(link.blocked());
    EXPECT_FALSE(link.Send(protocol::Heartbeat{kWorker})) << "blocked: nothing is queued";
    zmq::pollitem_t item{link.socket().handle(), 0, ZMQ_POLLOUT, 0};
    zmq::poll(&item, 1, 300ms);
    if (!(item.revents & ZMQ_POLLOUT)) break;  // full all the way to the broker
    link.Unblock();
  }
  ASSERT_TRUE(link.blocked());
  ASSERT_GE(accepted, static_cast<uint64_t>(BrokerLink::kSendHighWater));
  held = {"job-1", "job-2"};
  WaitSilent(link);

  // The broker resumes: everything queued arrives in order, and no Register
  // (it still knows the worker, and may send it jobs at once).
  ExpectChunks(broker, accepted);
  auto extra = broker.Recv(300ms);
  EXPECT_FALSE(extra.has_value()) << "got a "
                                  << protocol::TypeName(protocol::TypeOf(extra->second));
  // Its first word makes the link registered again.
  broker.Reply(protocol::Heartbeat{"broker-1"});
  zmq::pollitem_t item{link.socket().handle(), 0, ZMQ_POLLIN, 0};
  zmq::poll(&item, 1, 5s);
  auto m = link.Receive();
  ASSERT_TRUE(m.has_value());
  EXPECT_TRUE(link.OnHeard(Clock::now(), protocol::TypeOf(*m)));
  EXPECT_TRUE(link.registered());
}

}  // namespace
}  // namespace kiln::worker
