// WorkerTable: the broker's view of its connected workers, without I/O.
//
//   table.OnRegister(identity, reg, now);           // Register message
//   auto workers = table.Candidates(0);             // who may get jobs (ScheduleStore)
//   for (auto& dead : table.Expire(now)) { ... }    // liveness check
//
// Liveness follows ZeroMQ's Paranoid Pirate pattern: a worker that sent
// nothing for interval x liveness is dead. Which worker runs a job is decided
// in Redis from the slot leases of every broker (ScheduleStore); this table
// says which workers are alive, not draining and not refusing work.
// Belongs to the dispatcher's thread; Snapshot() copies are for other threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "broker/store/schedule_store.hpp"
#include "common/protocol/messages.hpp"

namespace kiln::broker {

using Clock = std::chrono::steady_clock;

struct WorkerInfo {
  std::string identity;  // ZeroMQ routing id (the worker id)
  common::protocol::Register reg;
  std::set<std::string> running;  // job ids this broker sent
  // Slots taken by other brokers' jobs, from the worker's heartbeats (every
  // worker serves every broker).
  uint32_t external_busy = 0;
  bool draining = false;
  bool refusing = false;  // refused a job for want of a slot; cleared by its next heartbeat
  Clock::time_point last_seen;
  int64_t registered_at_ms = 0;
  int64_t last_seen_ms = 0;  // wall clock, for display
};

class WorkerTable {
 public:
  explicit WorkerTable(Clock::duration dead_after) : dead_after_(dead_after) {}

  // Returns the jobs the worker was running under a previous registration
  // (a restarted worker has lost them).
  std::vector<std::string> OnRegister(const std::string& identity,
                                      const common::protocol::Register& reg, Clock::time_point now,
                                      int64_t now_ms);
  // False when the identity is unknown (the worker must register again).
  bool OnHeartbeat(const std::string& identity, const common::protocol::Heartbeat& hb,
                   Clock::time_point now, int64_t now_ms);
  // Any message from a known worker proves it alive.
  void Touch(const std::string& identity, Clock::time_point now, int64_t now_ms);
  // Removes the worker; returns the jobs it was running.
  std::vector<std::string> Remove(const std::string& identity);
  // Removes workers silent for longer than dead_after; returns (identity, jobs).
  std::vector<std::pair<std::string, std::vector<std::string>>> Expire(Clock::time_point now);

  // Live workers that may be sent jobs: not draining, not refusing. Their
  // slot limit is the smaller of their own slots and `slot_cap` (0: none).
  std::vector<WorkerSlots> Candidates(uint32_t slot_cap) const;
  void Assign(const std::string& identity, const std::string& job_id);
  void Release(const std::string& identity, const std::string& job_id);
  // The worker refused a job for want of a slot: send it nothing until its
  // next heartbeat.
  void MarkFull(const std::string& identity);
  // Slots of the worker in use, by this broker's jobs and others'.
  static size_t Busy(const WorkerInfo& w) { return w.running.size() + w.external_busy; }

  bool Known(const std::string& identity) const { return workers_.count(identity) != 0; }
  size_t size() const { return workers_.size(); }
  const std::map<std::string, WorkerInfo>& workers() const { return workers_; }

 private:
  Clock::duration dead_after_;
  std::map<std::string, WorkerInfo> workers_;
};

}  // namespace kiln::broker
