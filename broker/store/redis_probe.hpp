// RedisProbe: whether this broker reaches Redis, known without asking it on
// the caller's thread — a PING every interval on its own connection — so
// GET /v1/health answers at once even while Redis stalls.
//
//   RedisProbe probe(endpoint);
//   std::jthread t([&](std::stop_token st) { probe.Run(st); });
//   RedisProbe::State s = probe.state();   // any thread
//   probe.Fresh([](RedisProbe::State s) { ... });   // after a PING sent now
//
// Run() on one thread; state() and Fresh() from any. Fresh's callback runs
// on the probe's thread and must not block.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <stop_token>
#include <string>
#include <vector>

#include "broker/store/redis_connection.hpp"

namespace kiln::broker {

class RedisProbe {
 public:
  struct State {
    bool ok = false;
    std::string error;  // the last failure, while not ok
    std::chrono::steady_clock::time_point last_ok;
  };

  explicit RedisProbe(RedisEndpoint endpoint,
                      std::chrono::milliseconds interval = std::chrono::milliseconds(500))
      : endpoint_(std::move(endpoint)), interval_(interval) {}

  // Reachable when a PING succeeded within the last `stale` (3 intervals, at
  // least 2 s: a slow PING is not yet a dead Redis).
  State state() const;
  // Pings now (sharing the PING with other callers waiting) and calls `done`
  // with the state after it. A stalled Redis delays `done` by up to the
  // connection's timeout: callers bound their own wait.
  void Fresh(std::function<void(State)> done);
  void Run(std::stop_token stop);

 private:
  RedisEndpoint endpoint_;
  std::chrono::milliseconds interval_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool ever_ok_ = false;                             // guarded by mu_
  std::vector<std::function<void(State)>> waiting_;  // guarded by mu_
  State state_;                                      // guarded by mu_
};

}  // namespace kiln::broker
