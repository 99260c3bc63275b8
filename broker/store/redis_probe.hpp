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
//
// AwaitRedis: the start-up side — blocks until Redis serves this broker.
//
//   RedisStartStep tenants{"store the tenant limits", [&] { return schedule.PublishTenants(t); }};
//   RETURN_IF_ERROR(AwaitRedis(endpoint, endpoint.Redacted(), {&tenants, 1}, pause));
//
// From main(), before the broker serves; it blocks for as long as Redis takes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "broker/store/redis_connection.hpp"
#include "common/status.hpp"

namespace kiln::broker {

// One call the broker makes to Redis before it serves.
struct RedisStartStep {
  std::string what;  // for the log: "store the tenant limits"
  std::function<common::Status()> run;
};

struct RedisWaitOptions {
  std::chrono::milliseconds first_delay{100};  // then doubling
  std::chrono::milliseconds max_delay{5000};
  // A line on each step's first failure, then at most this often.
  std::chrono::milliseconds log_every{5000};
};

// Runs its own steps — Redis answers INFO and is 6.2 or later, then PING
// (no longer loading its dataset) — then `steps`, in order. A step failing
// with UNAVAILABLE (Redis unreachable or timing out, LOADING, BUSY,
// MASTERDOWN) is retried after a pause growing from 100 ms to 5 s, and the
// wait logs what it waits for and for how long (with the loading progress
// Redis reports) on the first failure and then every 5 s. Any other failure
// cannot be fixed by waiting (a password or permission refused, a Redis too
// old, a bad database number): it is returned at once. `pause(d)` sleeps for
// d and returns false when the broker must stop instead (a stop signal):
// then CANCELLED. A single call lasts at most the connection's 2 s timeout
// (plus 0.5 s per sentinel asked). `url` is what logs and errors name:
// pass endpoint.Redacted(), never a URL with its password.
common::Status AwaitRedis(const RedisEndpoint& endpoint, std::string_view url,
                          std::span<const RedisStartStep> steps,
                          const std::function<bool(std::chrono::milliseconds)>& pause,
                          const RedisWaitOptions& options = {});

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
