#include "worker/sandbox/fd_passing.hpp"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace kiln::worker::sandbox {

common::Status SendWithFds(int sock, std::string_view bytes, const std::vector<int>& fds,
                           int flags) {
  if (bytes.empty() || fds.size() > kMaxPassedFds) {
    return common::Internal("a descriptor message needs 1 byte and at most 16 descriptors");
  }
  for (int fd : fds) {
    if (fd < 0) return common::Internal("passing an invalid descriptor");
  }
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(kMaxPassedFds * sizeof(int))];
  std::memset(control, 0, sizeof control);
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(fds.size() * sizeof(int));
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
    std::memcpy(CMSG_DATA(c), fds.data(), fds.size() * sizeof(int));
  }
  ssize_t sent;
  do {
    sent = ::sendmsg(sock, &msg, flags | MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) return common::ErrnoStatus("sendmsg", errno);
  if (static_cast<size_t>(sent) != bytes.size()) return common::Internal("short sendmsg");
  return common::Status::Ok();
}

common::StatusOr<Received> ReceiveWithFds(int sock, size_t max_bytes, size_t max_fds, int flags) {
  if (max_fds > kMaxPassedFds) return common::Internal("too many descriptors asked for");
  Received r;
  r.bytes.resize(max_bytes);
  iovec iov{r.bytes.data(), r.bytes.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(kMaxPassedFds * sizeof(int))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = CMSG_SPACE(max_fds * sizeof(int));
  ssize_t got;
  do {
    got = ::recvmsg(sock, &msg, flags | MSG_CMSG_CLOEXEC);
  } while (got < 0 && errno == EINTR);
  if (got < 0) return common::ErrnoStatus("recvmsg", errno);
  r.bytes.resize(static_cast<size_t>(got));
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      r.fds.emplace_back(fd);
    }
  }
  r.truncated = (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
  return r;
}

}  // namespace kiln::worker::sandbox
