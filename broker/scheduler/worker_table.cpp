#include "broker/scheduler/worker_table.hpp"

#include <algorithm>
#include <limits>

#include "broker/job/isolation.hpp"

namespace kiln::broker {

RegisterOutcome WorkerTable::OnRegister(const std::string& identity,
                                        const common::protocol::Register& reg, int64_t now_ms) {
  RegisterOutcome out;
  std::map<std::string, int64_t> kept;
  auto it = workers_.find(identity);
  if (it != workers_.end()) {
    const bool same = !reg.incarnation.empty() && reg.incarnation == it->second.reg.incarnation;
    const std::set<std::string> held(reg.held_jobs.begin(), reg.held_jobs.end());
    for (const auto& [job, sent_ms] : it->second.running) {
      if (same && (held.count(job) || now_ms - sent_ms < kRegisterCrossingMs)) {
        kept.emplace(job, sent_ms);
      } else {
        out.lost.push_back(job);
      }
    }
    out.restarted = !same;
    out.fresh = !same;
  } else {
    out.fresh = true;
  }
  WorkerInfo& w = workers_[identity];
  if (out.fresh) w.sessions_from_ms = std::numeric_limits<int64_t>::max();
  w.identity = identity;
  w.reg = reg;
  w.reg.held_jobs.clear();  // only needed here
  // Parsed once; the views every heartbeat publishes share it.
  w.catalog = std::make_shared<const RuntimeCatalog>(ParseRuntimeCatalog(reg));
  w.reg.packages.clear();
  w.reg.runtime_versions.clear();
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
  std::vector<std::string> jobs;
  for (const auto& [job, sent_ms] : it->second.running) jobs.push_back(job);
  workers_.erase(it);
  return jobs;
}

std::vector<WorkerSlots> WorkerTable::Candidates(uint32_t slot_cap) const {
  std::vector<WorkerSlots> out;
  for (const auto& [id, w] : workers_) {
    if (w.draining || w.refusing) continue;
    // Placement tokens, not bare languages: a job matches only a worker of
    // its own isolation level.
    std::string runtimes = ",";
    for (const auto& r : w.reg.runtimes) runtimes += PlacementToken(r, w.reg.isolation) + ",";
    uint32_t slots = slot_cap > 0 ? std::min(slot_cap, w.reg.slots) : w.reg.slots;
    out.push_back({w.reg.worker_id, slots, std::move(runtimes)});
  }
  return out;
}

void WorkerTable::Assign(const std::string& identity, const std::string& job_id, int64_t now_ms) {
  auto it = workers_.find(identity);
  if (it != workers_.end()) it->second.running.emplace(job_id, now_ms);
}

void WorkerTable::MarkFull(const std::string& identity) {
  auto it = workers_.find(identity);
  if (it == workers_.end()) return;
  it->second.refusing = true;
}

void WorkerTable::SetSessionsFrom(const std::string& identity, int64_t ms) {
  auto it = workers_.find(identity);
  if (it != workers_.end()) it->second.sessions_from_ms = ms;
}

bool WorkerTable::SessionsFrom(const std::string& identity, int64_t decided_ms) const {
  auto it = workers_.find(identity);
  return it != workers_.end() && decided_ms >= it->second.sessions_from_ms;
}

void WorkerTable::Release(const std::string& identity, const std::string& job_id) {
  auto it = workers_.find(identity);
  if (it != workers_.end()) it->second.running.erase(job_id);
}

}  // namespace kiln::broker
