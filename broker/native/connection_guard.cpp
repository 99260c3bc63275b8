#include "broker/native/connection_guard.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>
#include <utility>

namespace kiln::broker {

std::string_view CloseReasonName(CloseReason reason) {
  switch (reason) {
    case CloseReason::kLimit:
      return "limit";
    case CloseReason::kAddressLimit:
      return "address_limit";
    case CloseReason::kAuthTimeout:
      return "auth_timeout";
    case CloseReason::kBadFrames:
      return "bad_frames";
    case CloseReason::kStalled:
      return "stalled";
  }
  return "limit";
}

std::string PeerAddressKey(const sockaddr_storage& peer) {
  char ip[INET6_ADDRSTRLEN] = {};
  if (peer.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(peer).sin_addr, ip, sizeof(ip));
    return ip;
  }
  if (peer.ss_family != AF_INET6) return "";
  in6_addr a = reinterpret_cast<const sockaddr_in6&>(peer).sin6_addr;
  if (IN6_IS_ADDR_V4MAPPED(&a)) {
    inet_ntop(AF_INET, &a.s6_addr[12], ip, sizeof(ip));
    return ip;
  }
  std::memset(&a.s6_addr[8], 0, 8);
  inet_ntop(AF_INET6, &a, ip, sizeof(ip));
  return std::string(ip) + "/64";
}

ConnectionGuard::ConnectionGuard(ConnectionLimits limits) : limits_(limits) {}

std::optional<CloseReason> ConnectionGuard::OnAccepted(int fd, Peer peer, Clock::time_point now) {
  OnDisconnected(fd);
  Connection c;
  c.peer = std::move(peer);
  c.generation = next_generation_++;
  deadlines_.push_back({now + limits_.auth_timeout, fd, c.generation});
  uint32_t from_address = 0;
  if (!c.peer.address.empty()) from_address = ++per_address_[c.peer.address];
  Connection& added = connections_.emplace(fd, std::move(c)).first->second;
  // The more specific reason first: one address over its share.
  if (!added.peer.address.empty() && from_address > limits_.max_per_address) {
    return MarkClosing(added, CloseReason::kAddressLimit);
  }
  if (connections_.size() > limits_.max_connections) return MarkClosing(added, CloseReason::kLimit);
  return std::nullopt;
}

void ConnectionGuard::OnDisconnected(int fd) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  const std::string& address = it->second.peer.address;
  if (!address.empty()) {
    auto a = per_address_.find(address);
    if (a != per_address_.end() && --a->second == 0) per_address_.erase(a);
  }
  connections_.erase(it);
}

void ConnectionGuard::OnAuthenticated(int fd) {
  auto it = connections_.find(fd);
  if (it != connections_.end()) it->second.authenticated = true;
}

std::optional<CloseReason> ConnectionGuard::OnBadFrame(int fd) {
  auto it = connections_.find(fd);
  if (it == connections_.end() || it->second.authenticated || it->second.closing) {
    return std::nullopt;
  }
  if (++it->second.bad_frames < limits_.max_bad_frames) return std::nullopt;
  return MarkClosing(it->second, CloseReason::kBadFrames);
}

std::vector<ConnectionGuard::Closing> ConnectionGuard::Due(Clock::time_point now) {
  std::vector<Closing> due;
  while (!deadlines_.empty() && deadlines_.front().at <= now) {
    const Deadline d = deadlines_.front();
    deadlines_.pop_front();
    auto it = connections_.find(d.fd);
    if (it == connections_.end() || it->second.generation != d.generation) continue;
    Connection& c = it->second;
    if (c.authenticated || c.closing) continue;
    due.push_back({d.fd, MarkClosing(c, CloseReason::kAuthTimeout)});
  }
  return due;
}

ConnectionGuard::Clock::time_point ConnectionGuard::NextDue() const {
  return deadlines_.empty() ? Clock::time_point::max() : deadlines_.front().at;
}

const ConnectionGuard::Peer* ConnectionGuard::Find(int fd) const {
  auto it = connections_.find(fd);
  return it == connections_.end() ? nullptr : &it->second.peer;
}

bool ConnectionGuard::IsAuthenticated(int fd) const {
  auto it = connections_.find(fd);
  return it != connections_.end() && it->second.authenticated;
}

size_t ConnectionGuard::CountFrom(const std::string& address) const {
  auto it = per_address_.find(address);
  return it == per_address_.end() ? 0 : it->second;
}

std::vector<int> ConnectionGuard::Fds() const {
  std::vector<int> fds;
  fds.reserve(connections_.size());
  for (const auto& [fd, c] : connections_) fds.push_back(fd);
  return fds;
}

CloseReason ConnectionGuard::MarkClosing(Connection& c, CloseReason reason) {
  c.closing = true;
  return reason;
}

}  // namespace kiln::broker
