// ConnectionGuard: the bookkeeping that keeps the native client endpoint from
// being exhausted by connections (docs/protocol.md, "Connections"): which
// connections the ROUTER holds, from which address, whether each has sent a
// request with a valid token yet, and which of them to close, and when. No
// I/O: the shell (NativeApi) feeds it the socket monitor's events, what each
// request turned out to be, and the clock; it closes what the guard names.
//
//   if (auto why = guard.OnAccepted(fd, {.address = "10.0.0.7", .identity = id}, now)) Close(fd);
//   for (const ConnectionGuard::Closing& c : guard.Due(now)) Close(c.fd);
//
// Rules: a connection over max_connections, or over max_per_address from its
// address, is closed at once; one that has not authenticated within
// auth_timeout is closed then; one that sends max_bad_frames failed requests
// (undecodable, wrong part count, a reply type, a wrong token) before it has
// authenticated is closed then. A connection named for closing stays counted
// until the shell reports it gone (its descriptor is still open) and is never
// named again.
//
// Threads: one (NativeApi's loop thread).
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kiln::broker {

struct ConnectionLimits {
  uint32_t max_connections = 4096;
  uint32_t max_per_address = 1024;
  std::chrono::milliseconds auth_timeout{10000};
  uint32_t max_bad_frames = 8;  // failed requests before the first valid one
};

enum class CloseReason { kLimit, kAddressLimit, kAuthTimeout, kBadFrames, kStalled };

// "limit", "address_limit", "auth_timeout", "bad_frames", "stalled" (metric labels).
std::string_view CloseReasonName(CloseReason reason);

// The key max_per_address counts a peer under: an IPv4 address as it is
// (also one mapped into IPv6), an IPv6 address by its /64 (one host usually
// holds a whole /64: "2001:db8:1:2::/64"), "" for other families (no
// per-address limit).
std::string PeerAddressKey(const sockaddr_storage& peer);

class ConnectionGuard {
 public:
  using Clock = std::chrono::steady_clock;

  // Who a connection is. `address` is the peer's IP ("" when the transport
  // has none: no per-address limit); `identity` is whatever the shell needs
  // to recognise the connection again (opaque here).
  struct Peer {
    std::string address;
    std::string identity;
  };
  struct Closing {
    int fd;
    CloseReason reason;
  };

  explicit ConnectionGuard(ConnectionLimits limits);

  // A new connection on `fd` (an entry left on that fd is replaced: the
  // kernel reuses numbers only once closed). A reason when it must close now.
  std::optional<CloseReason> OnAccepted(int fd, Peer peer, Clock::time_point now);
  // The connection on `fd` is gone (unknown fds are ignored).
  void OnDisconnected(int fd);
  // `fd` sent a request with a valid token: no auth timeout, no bad-frame count.
  void OnAuthenticated(int fd);
  // `fd` sent a request that failed. A reason when it must close now.
  std::optional<CloseReason> OnBadFrame(int fd);
  // Connections whose auth timeout has passed unauthenticated; each is named once.
  std::vector<Closing> Due(Clock::time_point now);
  // When Due may next name a connection (time_point::max() if none can).
  Clock::time_point NextDue() const;

  const Peer* Find(int fd) const;
  bool IsAuthenticated(int fd) const;
  // Connections held now, including those named for closing.
  size_t size() const { return connections_.size(); }
  size_t CountFrom(const std::string& address) const;
  // Every fd held (for the shell's periodic check that each is still there).
  std::vector<int> Fds() const;

 private:
  struct Connection {
    Peer peer;
    uint64_t generation = 0;  // tells an fd's successive connections apart
    bool authenticated = false;
    bool closing = false;
    uint32_t bad_frames = 0;
  };
  struct Deadline {
    Clock::time_point at;
    int fd;
    uint64_t generation;
  };

  static CloseReason MarkClosing(Connection& c, CloseReason reason);

  const ConnectionLimits limits_;
  std::unordered_map<int, Connection> connections_;
  std::unordered_map<std::string, uint32_t> per_address_;
  std::deque<Deadline> deadlines_;  // in acceptance order, so in deadline order
  uint64_t next_generation_ = 1;
};

}  // namespace kiln::broker
