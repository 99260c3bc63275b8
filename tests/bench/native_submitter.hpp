// NativeSubmitter: runs kiln-bench's jobs over a broker's native ZeroMQ client
// endpoint (docs/protocol.md "Client protocol") instead of HTTP. One DEALER,
// one job at a time: Submit sends `submit` with `subscribe: true` and waits
// for the job's `result`, so a Sample spans the same round trip as an HTTP
// `wait: true` POST (request sent -> final record read).
//
//   zmq::context_t ctx;
//   NativeSubmitter n(ctx, "tcp://127.0.0.1:5556", token, /*timeout_s=*/120);
//   Sample s = n.Submit(R"({"language":"python","code":"x = 1"})");
//
// Owned by one kiln-bench client thread (ZeroMQ sockets are not thread-safe);
// the context may be shared.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <zmq.hpp>

#include "tests/bench/bench_sample.hpp"

namespace kiln::bench {

class NativeSubmitter {
 public:
  NativeSubmitter(zmq::context_t& ctx, const std::string& endpoint, std::string token,
                  int timeout_s);

  // One job, end to end. Failures are outcomes, never exceptions:
  // "native/<error code>" for an `error` reply, "transport/<what>" when no
  // usable reply came within the timeout.
  Sample Submit(const std::string& request_json);

 private:
  zmq::socket_t socket_;
  std::string token_;
  std::chrono::milliseconds timeout_;
  // Replies to an earlier request (one that timed out) are skipped by id.
  uint64_t next_request_id_ = 1;
};

}  // namespace kiln::bench
