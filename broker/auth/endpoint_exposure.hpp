// Whether a ZeroMQ endpoint the broker binds can be reached from other
// hosts, and the start-up rule built on it: a worker endpoint reachable
// beyond this host must use CURVE unless the configuration says otherwise
// (broker.workers.allow_unauthenticated). Pure functions; any thread.
//
//   RETURN_IF_ERROR(CheckWorkerEndpointExposure(cfg.worker_endpoint, curve, allow));
#pragma once

#include <string_view>

#include "common/status.hpp"

namespace kiln::broker {

// tcp:// on a loopback address (127.0.0.0/8, ::1, localhost), ipc:// and
// inproc://. Wildcards (*, 0.0.0.0, ::), other addresses and names, and
// other transports are not.
bool IsLoopbackEndpoint(std::string_view endpoint);

common::Status CheckWorkerEndpointExposure(std::string_view endpoint, bool curve,
                                           bool allow_unauthenticated);

}  // namespace kiln::broker
