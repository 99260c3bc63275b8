// ConnectionGuard: the native endpoint's connection limits as pure
// bookkeeping, driven by hand-made events and a hand-moved clock.
#include "broker/native/connection_guard.hpp"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/un.h>

namespace kiln::broker {
namespace {

using std::chrono::milliseconds;
using Clock = ConnectionGuard::Clock;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

ConnectionGuard::Peer From(const std::string& address, int port = 0) {
  return {address, address + ":" + std::to_string(port)};
}

std::vector<int> FdsOf(const std::vector<ConnectionGuard::Closing>& closing, CloseReason reason) {
  std::vector<int> fds;
  for (const auto& c : closing) {
    EXPECT_EQ(c.reason, reason) << c.fd;
    fds.push_back(c.fd);
  }
  return fds;
}

const Clock::time_point t0 = Clock::time_point() + std::chrono::hours(1);

TEST(ConnectionGuard, ClosesConnectionsOverTheGlobalLimitAtOnce) {
  ConnectionGuard g(
      {.max_connections = 3, .max_per_address = 100, .auth_timeout = milliseconds(500)});
  EXPECT_EQ(g.OnAccepted(10, From("10.0.0.1"), t0), std::nullopt);
  EXPECT_EQ(g.OnAccepted(11, From("10.0.0.2"), t0), std::nullopt);
  EXPECT_EQ(g.OnAccepted(12, From("10.0.0.3"), t0), std::nullopt);
  EXPECT_EQ(g.OnAccepted(13, From("10.0.0.4"), t0), CloseReason::kLimit);
  // Still counted until it is gone: the next one is over as well.
  EXPECT_EQ(g.OnAccepted(14, From("10.0.0.5"), t0), CloseReason::kLimit);
  EXPECT_EQ(g.size(), 5u);
  g.OnDisconnected(13);
  g.OnDisconnected(14);
  g.OnDisconnected(10);
  EXPECT_EQ(g.OnAccepted(15, From("10.0.0.6"), t0), std::nullopt) << "room again";
  EXPECT_EQ(g.size(), 3u);
}

TEST(ConnectionGuard, ClosesConnectionsOverTheirAddressShare) {
  ConnectionGuard g(
      {.max_connections = 100, .max_per_address = 2, .auth_timeout = milliseconds(500)});
  EXPECT_EQ(g.OnAccepted(10, From("10.0.0.1", 1), t0), std::nullopt);
  EXPECT_EQ(g.OnAccepted(11, From("10.0.0.1", 2), t0), std::nullopt);
  EXPECT_EQ(g.OnAccepted(12, From("10.0.0.1", 3), t0), CloseReason::kAddressLimit);
  // Another address is not affected.
  EXPECT_EQ(g.OnAccepted(13, From("10.0.0.2", 1), t0), std::nullopt);
  EXPECT_EQ(g.CountFrom("10.0.0.1"), 3u);
  g.OnDisconnected(12);
  g.OnDisconnected(10);
  EXPECT_EQ(g.CountFrom("10.0.0.1"), 1u);
  EXPECT_EQ(g.OnAccepted(14, From("10.0.0.1", 4), t0), std::nullopt);
  // Transports without an address (ipc) only meet the global limit.
  for (int fd = 20; fd < 25; ++fd) EXPECT_EQ(g.OnAccepted(fd, From(""), t0), std::nullopt);
  EXPECT_EQ(g.CountFrom(""), 0u);
}

TEST(ConnectionGuard, UnauthenticatedConnectionsCloseAtTheAuthTimeout) {
  ConnectionGuard g(
      {.max_connections = 100, .max_per_address = 100, .auth_timeout = milliseconds(500)});
  ASSERT_FALSE(g.OnAccepted(10, From("10.0.0.1"), t0));
  ASSERT_FALSE(g.OnAccepted(11, From("10.0.0.1"), t0 + milliseconds(100)));
  ASSERT_FALSE(g.OnAccepted(12, From("10.0.0.1"), t0 + milliseconds(200)));
  EXPECT_EQ(g.NextDue(), t0 + milliseconds(500));
  g.OnAuthenticated(11);  // sent a request with a valid token
  EXPECT_THAT(g.Due(t0 + milliseconds(499)), IsEmpty());
  EXPECT_THAT(FdsOf(g.Due(t0 + milliseconds(650)), CloseReason::kAuthTimeout), ElementsAre(10));
  EXPECT_THAT(FdsOf(g.Due(t0 + milliseconds(700)), CloseReason::kAuthTimeout), ElementsAre(12));
  // Named once: still held until gone, never named again.
  EXPECT_THAT(g.Due(t0 + milliseconds(5000)), IsEmpty());
  EXPECT_EQ(g.size(), 3u);
  EXPECT_EQ(g.NextDue(), Clock::time_point::max());
  g.OnDisconnected(10);
  g.OnDisconnected(12);
  EXPECT_EQ(g.size(), 1u);
  EXPECT_TRUE(g.IsAuthenticated(11));
}

// An fd number reused by a later connection gets a deadline of its own: the
// first connection's deadline does not close the second early.
TEST(ConnectionGuard, AReusedFdStartsAfresh) {
  ConnectionGuard g(
      {.max_connections = 100, .max_per_address = 100, .auth_timeout = milliseconds(500)});
  ASSERT_FALSE(g.OnAccepted(10, From("10.0.0.1", 1), t0));
  g.OnAuthenticated(10);
  g.OnDisconnected(10);
  ASSERT_FALSE(g.OnAccepted(10, From("10.0.0.2", 7), t0 + milliseconds(300)));
  EXPECT_FALSE(g.IsAuthenticated(10)) << "the new connection has sent nothing";
  EXPECT_THAT(g.Due(t0 + milliseconds(600)), IsEmpty());
  EXPECT_THAT(FdsOf(g.Due(t0 + milliseconds(800)), CloseReason::kAuthTimeout), ElementsAre(10));
  // A missed disconnect: an accept on a held fd replaces the old entry.
  ConnectionGuard h(
      {.max_connections = 100, .max_per_address = 1, .auth_timeout = milliseconds(500)});
  ASSERT_FALSE(h.OnAccepted(10, From("10.0.0.1", 1), t0));
  EXPECT_EQ(h.OnAccepted(10, From("10.0.0.1", 2), t0), std::nullopt);
  EXPECT_EQ(h.size(), 1u);
  EXPECT_EQ(h.CountFrom("10.0.0.1"), 1u);
  EXPECT_EQ(h.Find(10)->identity, "10.0.0.1:2");
}

TEST(ConnectionGuard, BadFramesCloseOnlyUnauthenticatedConnections) {
  ConnectionGuard g({.max_connections = 100,
                     .max_per_address = 100,
                     .auth_timeout = milliseconds(500),
                     .max_bad_frames = 3});
  ASSERT_FALSE(g.OnAccepted(10, From("10.0.0.1"), t0));
  ASSERT_FALSE(g.OnAccepted(11, From("10.0.0.1"), t0));
  EXPECT_EQ(g.OnBadFrame(10), std::nullopt);
  EXPECT_EQ(g.OnBadFrame(10), std::nullopt);
  EXPECT_EQ(g.OnBadFrame(10), CloseReason::kBadFrames);
  EXPECT_EQ(g.OnBadFrame(10), std::nullopt) << "named once";
  g.OnAuthenticated(11);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(g.OnBadFrame(11), std::nullopt);
  // Named for bad frames, it is not named again at its auth timeout.
  EXPECT_THAT(g.Due(t0 + milliseconds(1000)), IsEmpty());
  EXPECT_EQ(g.OnBadFrame(99), std::nullopt) << "unknown fds are ignored";
  g.OnDisconnected(99);
  EXPECT_THAT(g.Fds(), UnorderedElementsAre(10, 11));
}

// 40 connections from one address with a share of 8: the 32 extra ones are
// named at once, the 8 others at their auth timeout unless they authenticate.
TEST(ConnectionGuard, AFloodFromOneAddress) {
  ConnectionGuard g(
      {.max_connections = 1000, .max_per_address = 8, .auth_timeout = milliseconds(500)});
  int closed_now = 0;
  for (int fd = 100; fd < 140; ++fd) {
    if (g.OnAccepted(fd, From("10.9.9.9", fd), t0) == CloseReason::kAddressLimit) ++closed_now;
  }
  EXPECT_EQ(closed_now, 32);
  ASSERT_FALSE(g.OnAccepted(5, From("10.0.0.1"), t0));  // a client elsewhere
  g.OnAuthenticated(5);
  for (int fd = 108; fd < 140; ++fd) g.OnDisconnected(fd);
  EXPECT_THAT(FdsOf(g.Due(t0 + milliseconds(500)), CloseReason::kAuthTimeout),
              ElementsAre(100, 101, 102, 103, 104, 105, 106, 107));
  for (int fd = 100; fd < 108; ++fd) g.OnDisconnected(fd);
  EXPECT_EQ(g.size(), 1u);
  EXPECT_EQ(g.CountFrom("10.9.9.9"), 0u);
}

sockaddr_storage Ip(const char* text) {
  sockaddr_storage s{};
  if (inet_pton(AF_INET, text, &reinterpret_cast<sockaddr_in&>(s).sin_addr) == 1) {
    s.ss_family = AF_INET;
  } else {
    EXPECT_EQ(inet_pton(AF_INET6, text, &reinterpret_cast<sockaddr_in6&>(s).sin6_addr), 1);
    s.ss_family = AF_INET6;
  }
  return s;
}

// One IPv6 host holds a /64: counting per address there would not limit it.
TEST(ConnectionGuard, PeersAreCountedPerIpv4AddressAndPerIpv6Slash64) {
  EXPECT_EQ(PeerAddressKey(Ip("10.1.2.3")), "10.1.2.3");
  EXPECT_EQ(PeerAddressKey(Ip("::ffff:10.1.2.3")), "10.1.2.3");
  EXPECT_EQ(PeerAddressKey(Ip("2001:db8:1:2:aaaa:bbbb:cccc:dddd")), "2001:db8:1:2::/64");
  EXPECT_EQ(PeerAddressKey(Ip("2001:db8:1:2::1")), "2001:db8:1:2::/64");
  EXPECT_NE(PeerAddressKey(Ip("2001:db8:1:3::1")), PeerAddressKey(Ip("2001:db8:1:2::1")));
  EXPECT_EQ(PeerAddressKey(Ip("::1")), "::/64");
  sockaddr_storage unix_peer{};
  unix_peer.ss_family = AF_UNIX;
  EXPECT_EQ(PeerAddressKey(unix_peer), "");
}

TEST(ConnectionGuard, ReasonNamesAreMetricLabels) {
  EXPECT_EQ(CloseReasonName(CloseReason::kLimit), "limit");
  EXPECT_EQ(CloseReasonName(CloseReason::kAddressLimit), "address_limit");
  EXPECT_EQ(CloseReasonName(CloseReason::kAuthTimeout), "auth_timeout");
  EXPECT_EQ(CloseReasonName(CloseReason::kBadFrames), "bad_frames");
}

}  // namespace
}  // namespace kiln::broker
