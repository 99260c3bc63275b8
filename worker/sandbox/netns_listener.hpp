// ListenInSandboxNetns: a listening TCP socket on 127.0.0.1:<port> inside a
// running sandbox's network namespace, held by the worker (network on
// request: the job's only way out is this socket, which the worker's egress
// gateway serves; worker/egress/).
//
//   ASSIGN_OR_RETURN(common::UniqueFd fd, ListenInSandboxNetns(pidfd, kSandboxProxyPort));
//
// A socket belongs to the network namespace it was created in, whatever
// thread later uses it: a short-lived thread of the worker joins the
// sandbox's namespace (setns by pidfd; setns of a network namespace is
// per thread), creates, binds and listens, and ends. The job cannot take
// the port first: its Landlock ruleset denies every TCP bind. Worker side
// only; any thread.
#pragma once

#include <cstdint>

#include "common/status.hpp"
#include "common/unique_fd.hpp"

namespace kiln::worker::sandbox {

// `pidfd` names the sandbox's pid 1, alive. Nonblocking, close-on-exec.
common::StatusOr<common::UniqueFd> ListenInSandboxNetns(int pidfd, uint16_t port);

}  // namespace kiln::worker::sandbox
