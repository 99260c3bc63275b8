// The egress gateway (worker/egress/) on real sockets: the test process
// moves into a network namespace of its own with a veth interface
// (10.77.0.1/24) where "destinations" listen, and plays the job itself
// against a listener on 127.0.0.1. Root needed.
#include "worker/egress/egress_gateway.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace kiln::worker {
namespace {

constexpr const char* kUpstreamIp = "10.77.0.1";

class EgressGatewayTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(::unshare(CLONE_NEWNET), 0) << "needs root: " << strerror(errno);
    ASSERT_EQ(
        std::system("ip link set lo up && ip link add d0 type veth peer name d1 && "
                    "ip addr add 10.77.0.1/24 dev d0 && ip link set d0 up && ip link set d1 up"),
        0);
  }

  void SetUp() override {
    // The destination: answers every connection with what it read first,
    // prefixed with "echo:", then closes.
    upstream_ = Listen(kUpstreamIp, &upstream_port_);
    server_ = std::thread([this] {
      while (true) {
        int c = ::accept(upstream_, nullptr, nullptr);
        if (c < 0) return;
        char buf[65536];
        ssize_t n = ::read(c, buf, sizeof buf);
        if (n > 0) {
          received_ += std::string(buf, static_cast<size_t>(n));
          std::string reply = "echo:" + std::string(buf, static_cast<size_t>(n));
          if (big_reply_) reply += std::string(256 * 1024, 'x');
          size_t off = 0;
          while (off < reply.size()) {
            ssize_t w = ::write(c, reply.data() + off, reply.size() - off);
            if (w <= 0) break;
            off += static_cast<size_t>(w);
          }
        }
        ::close(c);
      }
    });
    EgressConfig config;
    config.hosts = {{"up.test", kUpstreamIp}, {"loop.test", "127.0.0.1"}};
    config.allow_private = {"10.77.0.0/24"};
    config.deny_own_addresses = false;
    config.request_timeout_ms = 1500;
    config.max_open = 4;
    auto g = EgressGateway::Create(config);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    gateway_ = std::move(*g);
  }

  void TearDown() override {
    ::shutdown(upstream_, SHUT_RDWR);
    ::close(upstream_);
    server_.join();
  }

  static int Listen(const char* ip, uint16_t* port) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    ::inet_pton(AF_INET, ip, &a.sin_addr);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd, 16), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    *port = ntohs(a.sin_port);
    return fd;
  }

  // A lease for a "job" allowed `allow`; proxy_port_ is where it listens.
  std::unique_ptr<EgressLease> Open(std::vector<std::string> allow, uint64_t max_bytes = 1 << 20,
                                    uint64_t max_connections = 8) {
    int fd = Listen("127.0.0.1", &proxy_port_);
    auto list = common::ParseDestinations(allow, "allow");
    EXPECT_TRUE(list.ok());
    auto lease =
        gateway_->Open(common::UniqueFd(fd), EgressJob{"job-1", *list, max_bytes, max_connections});
    EXPECT_TRUE(lease.ok()) << lease.status().ToString();
    return lease.ok() ? std::move(*lease) : nullptr;
  }

  // A connection to the gateway's listener, as the job would open it.
  int ConnectToGateway() const {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(proxy_port_);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    return fd;
  }

  // Sends `request` to the gateway as the job would; everything it answers.
  std::string Ask(const std::string& request, const std::string& then = "") {
    int fd = ConnectToGateway();
    EXPECT_EQ(::write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
    std::string out;
    char buf[65536];
    bool sent_then = then.empty();
    while (true) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 5000) <= 0) break;
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
      if (!sent_then && out.find("\r\n\r\n") != std::string::npos) {
        EXPECT_EQ(::write(fd, then.data(), then.size()), static_cast<ssize_t>(then.size()));
        sent_then = true;
      }
    }
    ::close(fd);
    return out;
  }

  std::string Target() const { return "up.test:" + std::to_string(upstream_port_); }

  int upstream_ = -1;
  uint16_t upstream_port_ = 0;
  uint16_t proxy_port_ = 0;
  std::thread server_;
  std::string received_;  // server thread's; read after the exchange ended
  std::atomic<bool> big_reply_{false};
  std::unique_ptr<EgressGateway> gateway_;
};

TEST_F(EgressGatewayTest, ConnectTunnelsToAnAllowedNameAndCounts) {
  auto lease = Open({Target()});
  std::string out =
      Ask("CONNECT " + Target() + " HTTP/1.1\r\nHost: " + Target() + "\r\n\r\n", "hello");
  EXPECT_EQ(out, "HTTP/1.1 200 Connection established\r\n\r\necho:hello");
  auto usage = lease->Finish();
  EXPECT_EQ(usage.connections, 1u);
  EXPECT_EQ(usage.refused, 0u);
  EXPECT_EQ(usage.bytes_out, 5u);
  EXPECT_EQ(usage.bytes_in, 10u);
  ASSERT_EQ(usage.destinations.size(), 1u);
  EXPECT_EQ(usage.destinations[0].host, "up.test");
  EXPECT_TRUE(usage.destinations[0].allowed);
}

TEST_F(EgressGatewayTest, PlainHttpIsForwardedInOriginFormWithConnectionClose) {
  auto lease = Open({Target()});
  std::string out = Ask("GET http://" + Target() +
                        "/path?q=1 HTTP/1.1\r\nHost: up.test\r\nProxy-Connection: keep-alive\r\n"
                        "Proxy-Authorization: Basic eA==\r\nX-A: 1\r\n\r\n");
  EXPECT_EQ(out.rfind("echo:GET /path?q=1 HTTP/1.1\r\n", 0), 0u) << out;
  EXPECT_NE(out.find("X-A: 1\r\n"), std::string::npos);
  EXPECT_NE(out.find("Connection: close\r\n"), std::string::npos);
  EXPECT_EQ(out.find("Proxy-"), std::string::npos) << out;
  EXPECT_EQ(lease->Finish().connections, 1u);
}

TEST_F(EgressGatewayTest, RefusesWhatTheListDoesNotAllowAndRecordsWhy) {
  auto lease = Open({Target(), "loop.test:*"});
  std::string off = Ask("CONNECT other.test:443 HTTP/1.1\r\n\r\n");
  EXPECT_EQ(off.rfind("HTTP/1.1 403 Forbidden\r\n", 0), 0u) << off;
  EXPECT_NE(off.find("not on this job's network allowlist"), std::string::npos);
  // By address: only what the list names literally.
  std::string ip = Ask("CONNECT " + std::string(kUpstreamIp) + ":" +
                       std::to_string(upstream_port_) + " HTTP/1.1\r\n\r\n");
  EXPECT_EQ(ip.rfind("HTTP/1.1 403", 0), 0u) << ip;
  // Allowed by name, but it leads to loopback.
  std::string loop = Ask("CONNECT loop.test:6379 HTTP/1.1\r\n\r\n");
  EXPECT_EQ(loop.rfind("HTTP/1.1 403", 0), 0u) << loop;
  EXPECT_NE(loop.find("resolves only to addresses"), std::string::npos);
  std::string origin = Ask("GET / HTTP/1.1\r\nHost: up.test\r\n\r\n");
  EXPECT_EQ(origin.rfind("HTTP/1.1 400", 0), 0u) << origin;
  auto usage = lease->Finish();
  EXPECT_EQ(usage.connections, 0u);
  EXPECT_EQ(usage.refused, 4u);
  ASSERT_EQ(usage.destinations.size(), 3u);
  std::map<std::string, std::string> why;
  for (const auto& d : usage.destinations) why[d.host] = d.reason;
  EXPECT_EQ(why["other.test"], "not_allowed");
  EXPECT_EQ(why[kUpstreamIp], "not_allowed");
  EXPECT_EQ(why["loop.test"], "address_refused");
  EXPECT_TRUE(received_.empty()) << "the destination was reached: " << received_;
}

TEST_F(EgressGatewayTest, TheByteCapTripsTheLimitAndCutsTheJobOff) {
  big_reply_ = true;
  auto lease = Open({Target()}, /*max_bytes=*/64 * 1024);
  std::string out = Ask("CONNECT " + Target() + " HTTP/1.1\r\n\r\n", "give");
  EXPECT_LT(out.size(), 64u * 1024 + 100);
  pollfd p{lease->limit_fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 2000), 1);
  auto usage = lease->Finish();
  EXPECT_EQ(usage.limit, "bytes");
  EXPECT_EQ(lease->LimitMessage().rfind("bytes: ", 0), 0u) << lease->LimitMessage();
}

TEST_F(EgressGatewayTest, TheConnectionCapTripsTheLimit) {
  auto lease = Open({Target()}, 1 << 20, /*max_connections=*/2);
  for (int i = 0; i < 2; ++i) Ask("CONNECT nope.test:1 HTTP/1.1\r\n\r\n");
  pollfd p{lease->limit_fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 0) << "tripped before the cap";
  Ask("CONNECT nope.test:1 HTTP/1.1\r\n\r\n");
  EXPECT_EQ(::poll(&p, 1, 2000), 1);
  EXPECT_EQ(lease->Finish().limit, "connections");
}

// What a hostile job may send the gateway: heads too large, never finished,
// or more connections at once than it may hold. Each is cut off alone; the
// gateway keeps serving.
TEST_F(EgressGatewayTest, HostileClientsAreCutOffAndTheGatewayGoesOn) {
  auto lease = Open({Target()}, 1 << 20, /*max_connections=*/100);
  // A head over 16 KiB: closed without an answer.
  std::string huge = "CONNECT " + Target() + " HTTP/1.1\r\nX: " + std::string(20000, 'a');
  EXPECT_EQ(Ask(huge), "");
  // A head that never ends: closed after request_timeout_ms.
  int idle = ConnectToGateway();
  ASSERT_EQ(::write(idle, "CONN", 4), 4);
  pollfd p{idle, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 5000), 1);
  char c;
  EXPECT_EQ(::read(idle, &c, 1), 0) << "an unfinished head was kept open";
  ::close(idle);
  // More open at once than max_open (4): the extra ones are closed at once.
  std::vector<int> held;
  for (int i = 0; i < 6; ++i) held.push_back(ConnectToGateway());
  // Well before request_timeout_ms closes the four it kept.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  int closed = 0;
  for (int fd : held) {
    pollfd q{fd, POLLIN, 0};
    if (::poll(&q, 1, 0) == 1 && ::read(fd, &c, 1) == 0) ++closed;
  }
  EXPECT_EQ(closed, 2);
  for (int fd : held) ::close(fd);
  // And the job's own traffic still flows.
  std::string out = Ask("CONNECT " + Target() + " HTTP/1.1\r\n\r\n", "ok");
  EXPECT_EQ(out, "HTTP/1.1 200 Connection established\r\n\r\necho:ok");
}

}  // namespace
}  // namespace kiln::worker
