// WorkerTable: the broker's view of its connected workers, without I/O.
//
//   table.OnRegister(identity, reg, now);           // Register message
//   if (auto w = table.Pick("python")) table.Assign(*w, job_id);
//   for (auto& dead : table.Expire(now)) { ... }    // liveness check
//
// Liveness follows ZeroMQ's Paranoid Pirate pattern: a worker that sent
// nothing for interval x liveness is dead. Pick() chooses, among live workers
// that offer the runtime, have a free slot and are not draining, the one with
// the lowest load (busy / slots), ties broken by fewest busy; busy counts
// this broker's jobs plus other brokers' (from the worker's heartbeats).
// Belongs to the dispatcher's thread; Snapshot() copies are for other threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

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

  std::optional<std::string> Pick(const std::string& runtime) const;
  void Assign(const std::string& identity, const std::string& job_id);
  void Release(const std::string& identity, const std::string& job_id);
  // The worker refused a job for want of a slot: treat it as full until its
  // next heartbeat says otherwise.
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
