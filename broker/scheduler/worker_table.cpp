#include "broker/scheduler/worker_table.hpp"

#include <algorithm>

namespace kiln::broker {

std::vector<std::string> WorkerTable::OnRegister(const std::string& identity,
                                                 const common::protocol::Register& reg,
                                                 Clock::time_point now, int64_t now_ms) {
  std::vector<std::string> lost;
  auto it = workers_.find(identity);
  if (it != workers_.end()) {
    lost.assign(it->second.running.begin(), it->second.running.end());
  }
  WorkerInfo& w = workers_[identity];
  w.identity = identity;
  w.reg = reg;
  w.running.clear();
  w.draining = false;
  w.refusing = false;
  w.last_seen = now;
  w.registered_at_ms = now_ms;
  w.last_seen_ms = now_ms;
  return lost;
}

bool WorkerTable::OnHeartbeat(const std::string& identity, const common::protocol::Heartbeat& hb,
                              Clock::time_point now, int64_t now_ms) {
  auto it = workers_.find(identity);
  if (it == workers_.end()) return false;
  WorkerInfo& w = it->second;
  w.last_seen = now;
  w.last_seen_ms = now_ms;
  w.draining = hb.draining;
  w.refusing = false;
  w.external_busy =
      hb.running > w.running.size() ? static_cast<uint32_t>(hb.running - w.running.size()) : 0;
  return true;
}

void WorkerTable::Touch(const std::string& identity, Clock::time_point now, int64_t now_ms) {
  auto it = workers_.find(identity);
  if (it == workers_.end()) return;
  it->second.last_seen = now;
  it->second.last_seen_ms = now_ms;
}

std::vector<std::string> WorkerTable::Remove(const std::string& identity) {
  auto it = workers_.find(identity);
  if (it == workers_.end()) return {};
  std::vector<std::string> jobs(it->second.running.begin(), it->second.running.end());
  workers_.erase(it);
  return jobs;
}

std::vector<std::pair<std::string, std::vector<std::string>>> WorkerTable::Expire(
    Clock::time_point now) {
  std::vector<std::pair<std::string, std::vector<std::string>>> dead;
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (now - it->second.last_seen > dead_after_) {
      dead.emplace_back(it->first, std::vector<std::string>(it->second.running.begin(),
                                                            it->second.running.end()));
      it = workers_.erase(it);
    } else {
      ++it;
    }
  }
  return dead;
}

std::vector<WorkerSlots> WorkerTable::Candidates(uint32_t slot_cap) const {
  std::vector<WorkerSlots> out;
  for (const auto& [id, w] : workers_) {
    if (w.draining || w.refusing) continue;
    std::string runtimes = ",";
    for (const auto& r : w.reg.runtimes) runtimes += r + ",";
    uint32_t slots = slot_cap > 0 ? std::min(slot_cap, w.reg.slots) : w.reg.slots;
    out.push_back({w.reg.worker_id, slots, std::move(runtimes)});
  }
  return out;
}

void WorkerTable::Assign(const std::string& identity, const std::string& job_id) {
  auto it = workers_.find(identity);
  if (it != workers_.end()) it->second.running.insert(job_id);
}

void WorkerTable::MarkFull(const std::string& identity) {
  auto it = workers_.find(identity);
  if (it == workers_.end()) return;
  it->second.refusing = true;
}

void WorkerTable::Release(const std::string& identity, const std::string& job_id) {
  auto it = workers_.find(identity);
  if (it != workers_.end()) it->second.running.erase(job_id);
}

}  // namespace kiln::broker
