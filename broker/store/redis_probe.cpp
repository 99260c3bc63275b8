#include "broker/store/redis_probe.hpp"

#include <algorithm>

namespace kiln::broker {

RedisProbe::State RedisProbe::state() const {
  std::lock_guard lock(mu_);
  State s = state_;
  const auto stale = std::max<std::chrono::milliseconds>(interval_ * 3, std::chrono::seconds(2));
  if (s.ok && std::chrono::steady_clock::now() - s.last_ok > stale) {
    s.ok = false;
    s.error = "redis: no answer to PING for " +
              std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::steady_clock::now() - s.last_ok)
                                 .count()) +
              " ms";
  }
  if (!ever_ok_ && s.error.empty()) s.error = "redis: not reached yet";
  return s;
}

void RedisProbe::Fresh(std::function<void(State)> done) {
  std::lock_guard lock(mu_);
  waiting_.push_back(std::move(done));
  cv_.notify_all();
}

void RedisProbe::Run(std::stop_token stop) {
  std::stop_callback wake(stop, [this] {
    std::lock_guard lock(mu_);
    cv_.notify_all();
  });
  auto conn = RedisConnection::Lazy(endpoint_);
  while (!stop.stop_requested()) {
    std::vector<std::function<void(State)>> done;
    {
      std::lock_guard lock(mu_);
      done.swap(waiting_);
    }
    auto r = conn->Command({"PING"});
    {
      std::lock_guard lock(mu_);
      if (r.ok()) {
        ever_ok_ = true;
        state_.ok = true;
        state_.error.clear();
        state_.last_ok = std::chrono::steady_clock::now();
      } else {
        state_.ok = false;
        state_.error = r.status().message();
      }
    }
    if (!done.empty()) {
      const State s = state();
      for (auto& fn : done) fn(s);
    }
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, interval_, [&] { return stop.stop_requested() || !waiting_.empty(); });
  }
}

}  // namespace kiln::broker
