#include "broker/native/client_connections.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <optional>

#include "broker/metrics/broker_metrics.hpp"
#include "common/log/logging.hpp"

namespace kiln::broker {
namespace {

const common::SubsystemLog kLog("native");

// Monitor events handled per DrainEvents, so a connection flood cannot keep
// the loop from serving requests.
constexpr int kEventBurst = 4096;
// How often every held fd is checked to still be its connection (a
// connection libzmq dropped without a DISCONNECTED event is forgotten).
constexpr auto kSweepInterval = std::chrono::seconds(10);

// "ip:port", "[ip6]:port", a unix path, or "" (unnamed).
std::string Format(const sockaddr_storage& a, socklen_t len) {
  char ip[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(a);
    inet_ntop(AF_INET, &in.sin_addr, ip, sizeof(ip));
    return std::string(ip) + ":" + std::to_string(ntohs(in.sin_port));
  }
  if (a.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a);
    inet_ntop(AF_INET6, &in6.sin6_addr, ip, sizeof(ip));
    // Appended piece by piece: "[" + std::string trips GCC 12's -Wrestrict
    // false positive at -O3 (the Release build).
    std::string out = "[";
    out += ip;
    out += "]:";
    out += std::to_string(ntohs(in6.sin6_port));
    return out;
  }
  if (a.ss_family == AF_UNIX && len > offsetof(sockaddr_un, sun_path)) {
    const auto& un = reinterpret_cast<const sockaddr_un&>(a);
    return std::string(un.sun_path, len - offsetof(sockaddr_un, sun_path));
  }
  return "";
}

// What the socket on `fd` is now: its peer's address, and an identity that
// differs for any other socket later given the same number (inode, local and
// peer address). Nothing when fd is not a connected socket.
std::optional<ConnectionGuard::Peer> Inspect(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return std::nullopt;
  sockaddr_storage peer{}, local{};
  socklen_t peer_len = sizeof(peer), local_len = sizeof(local);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) {
    return std::nullopt;
  }
  return ConnectionGuard::Peer{
      PeerAddressKey(peer),
      std::to_string(st.st_ino) + " " + Format(local, local_len) + " " + Format(peer, peer_len)};
}

}  // namespace

common::StatusOr<std::unique_ptr<ClientConnections>> ClientConnections::Create(
    zmq::context_t* ctx, zmq::socket_t& router, ConnectionLimits limits, BrokerMetrics* metrics) {
  std::unique_ptr<ClientConnections> c(new ClientConnections(limits, metrics));
  const std::string endpoint =
      "inproc://kiln-native-monitor-" + std::to_string(reinterpret_cast<uintptr_t>(c.get()));
  if (zmq_socket_monitor(router.handle(), endpoint.c_str(),
                         ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) != 0) {
    return common::ErrnoStatus("zmq_socket_monitor", zmq_errno());
  }
  try {
    c->monitor_ = zmq::socket_t(*ctx, zmq::socket_type::pair);
    c->monitor_.set(zmq::sockopt::linger, 0);
    // libzmq sends events blocking, from its I/O thread: never let the pipe fill.
    c->monitor_.set(zmq::sockopt::rcvhwm, 0);
    c->monitor_.set(zmq::sockopt::sndhwm, 0);
    c->monitor_.connect(endpoint);
  } catch (const zmq::error_t& e) {
    zmq_socket_monitor(router.handle(), nullptr, 0);
    return common::InvalidRequest(std::string("cannot monitor the client endpoint: ") + e.what());
  }
  c->router_ = router.handle();
  return c;
}

ClientConnections::ClientConnections(ConnectionLimits limits, BrokerMetrics* metrics)
    : guard_(limits), metrics_(metrics), next_sweep_(Clock::now() + kSweepInterval) {}

ClientConnections::~ClientConnections() {
  // Stop the monitor before its reader goes: a blocking event send to a
  // closed PAIR would hang libzmq's I/O thread.
  if (router_ != nullptr) zmq_socket_monitor(router_, nullptr, 0);
}

void ClientConnections::DrainEvents() {
  for (int i = 0; i < kEventBurst; ++i) {
    zmq::message_t head, address;
    try {
      if (!monitor_.recv(head, zmq::recv_flags::dontwait)) return;
      if (head.more()) (void)monitor_.recv(address, zmq::recv_flags::none);
    } catch (const zmq::error_t& e) {
      if (e.num() != EAGAIN) kLog.Warn({}, "monitor receive failed: {}", e.what());
      return;
    }
    // Version 1 events: u16 event, u32 value (the fd), then the endpoint.
    if (head.size() < 6) continue;
    uint16_t event = 0;
    uint32_t value = 0;
    std::memcpy(&event, head.data(), sizeof(event));
    std::memcpy(&value, static_cast<const char*>(head.data()) + sizeof(event), sizeof(value));
    const int fd = static_cast<int>(value);
    if (event == ZMQ_EVENT_ACCEPTED) {
      OnAccepted(fd);
    } else if (event == ZMQ_EVENT_DISCONNECTED) {
      OnDisconnected(fd);
    }
  }
}

void ClientConnections::OnAccepted(int fd) {
  auto peer = Inspect(fd);
  if (!peer) return;  // gone already (its DISCONNECTED follows, for an unknown fd)
  auto why = guard_.OnAccepted(fd, std::move(*peer), Clock::now());
  Publish();
  if (why) Close(fd, *why);
}

void ClientConnections::OnDisconnected(int fd) {
  guard_.OnDisconnected(fd);
  Publish();
}

int ClientConnections::SourceOf(const zmq::message_t& part) {
  // ZMQ_SRCFD: deprecated in libzmq but kept (4.3.x): the "__fd" property.
  const int fd = zmq_msg_get(part.handle(), ZMQ_SRCFD);
  if (fd < 0) return -1;
  // Its ACCEPTED event may still be waiting in the monitor's pipe.
  if (guard_.Find(fd) == nullptr) DrainEvents();
  return guard_.Find(fd) != nullptr ? fd : -1;
}

void ClientConnections::Authenticated(int fd) {
  if (fd >= 0) guard_.OnAuthenticated(fd);
}

void ClientConnections::BadFrame(int fd) {
  if (fd < 0) return;
  if (auto why = guard_.OnBadFrame(fd)) Close(fd, *why);
}

void ClientConnections::Tick(Clock::time_point now) {
  for (const auto& c : guard_.Due(now)) Close(c.fd, c.reason);
  if (now >= next_sweep_) {
    Sweep();
    next_sweep_ = now + kSweepInterval;
  }
}

std::chrono::milliseconds ClientConnections::UntilDue(Clock::time_point now,
                                                      std::chrono::milliseconds cap) const {
  const Clock::time_point due = guard_.NextDue();
  if (due == Clock::time_point::max() || due - now >= cap) return cap;
  if (due <= now) return std::chrono::milliseconds(0);
  // Rounded up, so the loop does not wake just before the deadline.
  return std::chrono::ceil<std::chrono::milliseconds>(due - now);
}

void ClientConnections::Close(int fd, CloseReason reason) {
  const ConnectionGuard::Peer* known = guard_.Find(fd);
  auto current = Inspect(fd);
  if (known == nullptr || !current || current->identity != known->identity) {
    // Gone by itself (its fd may even be another socket by now): forget it,
    // touch nothing.
    OnDisconnected(fd);
    return;
  }
  // Counted first: whoever sees the connection close sees it counted.
  if (metrics_) metrics_->NativeConnectionClosed(std::string(CloseReasonName(reason)));
  ::shutdown(fd, SHUT_RDWR);
  static common::LogLimiter limit(/*lines=*/10, std::chrono::seconds(10));
  kLog.Info(limit, {}, "closed a client connection from {} ({}; {} from that address, {} in all)",
            known->address.empty() ? "a local socket" : known->address, CloseReasonName(reason),
            guard_.CountFrom(known->address), guard_.size());
}

void ClientConnections::Sweep() {
  // Events first, so a connection that went and was replaced is seen in order.
  DrainEvents();
  for (int fd : guard_.Fds()) {
    const ConnectionGuard::Peer* known = guard_.Find(fd);
    auto current = Inspect(fd);
    if (known == nullptr || !current || current->identity != known->identity) {
      guard_.OnDisconnected(fd);
    }
  }
  Publish();
}

void ClientConnections::Publish() {
  if (metrics_) metrics_->SetNativeConnections(guard_.size());
}

}  // namespace kiln::broker
