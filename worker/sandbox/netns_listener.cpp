#include "worker/sandbox/netns_listener.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>

#include <cerrno>
#include <thread>

namespace kiln::worker::sandbox {

common::StatusOr<common::UniqueFd> ListenInSandboxNetns(int pidfd, uint16_t port) {
  common::StatusOr<common::UniqueFd> out = common::Internal("not run");
  std::thread t([&] {
    if (::setns(pidfd, CLONE_NEWNET) != 0) {
      out = common::ErrnoStatus("setns into the sandbox's network namespace", errno);
      return;
    }
    common::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd.valid()) {
      out = common::ErrnoStatus("socket", errno);
      return;
    }
    // A session's earlier executions may have left connections to the port
    // in TIME_WAIT.
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      out =
          common::ErrnoStatus("bind 127.0.0.1:" + std::to_string(port) + " in the sandbox", errno);
      return;
    }
    if (::listen(fd.get(), 64) != 0) {
      out = common::ErrnoStatus("listen", errno);
      return;
    }
    out = std::move(fd);
  });
  t.join();
  return out;
}

}  // namespace kiln::worker::sandbox
