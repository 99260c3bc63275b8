#include "broker/scheduler/worker_table.hpp"

#include <algorithm>

namespace kiln::broker {

RegisterOutcome WorkerTable::OnRegister(const std::string& identity,
                                        const common::protocol::Register& reg, int64_t now_ms) {
  RegisterOutcome out;
  std::set<std::string> kept;
  auto it = workers_.find(identity);
  if (it != workers_.end()) {
    const bool same = !reg.incarnation.empty() && reg.incarnation == it->second.reg.incarnation;
    const std::set<std::string> held(reg.held_jobs.begin(), reg.held_jobs.end());
    for (const auto& job : it->second.running) {
      if (same && held.count(job)) {
        kept.insert(job);
      } else {
        out.lost.push_back(job);
      }
    }
    out.restarted = !same;
  }
  WorkerInfo& w = workers_[identity];
  w.identity = identity;
  w.reg = reg;
  w.reg.held_jobs.clear();  // only needed here
  w.running = std::move(kept);
  w.draining = false;
  w.refusing = false;
  w.registered_at_ms = now_ms;
  w.last_seen_ms = now_ms;
  return out;
}

bool WorkerTable::OnHeartbeat(const std::string& identity, const common::protocol::Heartbeat& hb,
                              int64_t now_ms) {
  auto it = workers_.find(identity);
  if (it == workers_.end()) return false;
  WorkerInfo& w = it->second;
  w.last_seen_ms = now_ms;
  w.draining = hb.draining;
  w.refusing = false;
  w.external_busy =
      hb.running > w.running.size() ? static_cast<uint32_t>(hb.running - w.running.size()) : 0;
  return true;
}

std::vector<std::string> WorkerTable::Remove(const std::string& identity) {
  auto it = workers_.find(identity);
  if (it == workers_.end()) return {};
  std::vector<std::string> jobs(it->second.running.begin(), it->second.running.end());
  workers_.erase(it);
  return jobs;
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
