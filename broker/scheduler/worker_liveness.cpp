#include "broker/scheduler/worker_liveness.hpp"

namespace kiln::broker {

bool WorkerLiveness::Turn(Clock::time_point now) {
  const bool stalled = last_turn_ != Clock::time_point{} && now - last_turn_ > interval_;
  last_turn_ = now;
  if (stalled) {
    for (auto& [id, heard] : last_heard_) heard = now;
  }
  return stalled;
}

bool WorkerLiveness::Heard(const std::string& id, Clock::time_point now) {
  auto it = last_heard_.find(id);
  if (it == last_heard_.end()) return false;
  it->second = now;
  return true;
}

std::vector<std::string> WorkerLiveness::Expire(Clock::time_point now) {
  std::vector<std::string> dead;
  for (auto it = last_heard_.begin(); it != last_heard_.end();) {
    if (now - it->second > dead_after_) {
      dead.push_back(it->first);
      it = last_heard_.erase(it);
    } else {
      ++it;
    }
  }
  return dead;
}

size_t WorkerLiveness::Late(Clock::time_point now) const {
  size_t late = 0;
  for (const auto& [id, heard] : last_heard_) {
    if (now - heard > interval_ * 3 / 2) ++late;
  }
  return late;
}

std::vector<std::string> WorkerLiveness::Ids() const {
  std::vector<std::string> ids;
  ids.reserve(last_heard_.size());
  for (const auto& [id, heard] : last_heard_) ids.push_back(id);
  return ids;
}

}  // namespace kiln::broker
