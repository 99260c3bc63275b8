// fd_passing: one message with descriptors over a Unix socket (SCM_RIGHTS),
// for the worker's side of its sandboxes (the gVisor level's stdio, the
// seccomp listener, the zygote's plans and answers). The child side of a
// spawn cannot allocate and keeps its own (contain.cpp); kiln-init too.
//
//   RETURN_IF_ERROR(SendWithFds(sock, bytes, {a, b}));
//   ASSIGN_OR_RETURN(Received r, ReceiveWithFds(sock, 8, 1, MSG_DONTWAIT));
//
// Any thread; no state.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.hpp"
#include "common/unique_fd.hpp"

namespace kiln::worker::sandbox {

// The most descriptors one message carries here.
inline constexpr size_t kMaxPassedFds = 16;

// `bytes` (at least one) and `fds` in one message, whole (a short send is an
// error). EINTR is retried; MSG_NOSIGNAL is always set.
common::Status SendWithFds(int sock, std::string_view bytes, const std::vector<int>& fds,
                           int flags = 0);

struct Received {
  std::string bytes;                  // empty: the peer closed the socket
  std::vector<common::UniqueFd> fds;  // close-on-exec
  bool truncated = false;             // bytes or descriptors did not all fit
};
// One message of up to `max_bytes` with up to `max_fds` descriptors.
common::StatusOr<Received> ReceiveWithFds(int sock, size_t max_bytes, size_t max_fds,
                                          int flags = 0);

}  // namespace kiln::worker::sandbox
