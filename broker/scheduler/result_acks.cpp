#include "broker/scheduler/result_acks.hpp"

namespace kiln::broker {

void ResultAcks::Add(const std::string& worker, std::string job_id, Clock::time_point now) {
  auto [it, fresh] = held_.try_emplace(worker);
  if (fresh) it->second.since = now;
  it->second.ids.push_back(std::move(job_id));
}

std::vector<std::string> ResultAcks::TakeFor(const std::string& worker) {
  auto it = held_.find(worker);
  if (it == held_.end()) return {};
  std::vector<std::string> ids = std::move(it->second.ids);
  held_.erase(it);
  return ids;
}

std::vector<std::pair<std::string, std::string>> ResultAcks::TakeDue(Clock::time_point now) {
  std::vector<std::pair<std::string, std::string>> out;
  for (auto it = held_.begin(); it != held_.end();) {
    if (now < it->second.since + kHold && it->second.ids.size() < kMaxHeld) {
      ++it;
      continue;
    }
    for (auto& id : it->second.ids) out.emplace_back(it->first, std::move(id));
    it = held_.erase(it);
  }
  return out;
}

std::optional<ResultAcks::Clock::time_point> ResultAcks::NextDue() const {
  std::optional<Clock::time_point> due;
  for (const auto& [worker, held] : held_) {
    const auto at = held.ids.size() >= kMaxHeld ? held.since : held.since + kHold;
    if (!due || at < *due) due = at;
  }
  return due;
}

}  // namespace kiln::broker
