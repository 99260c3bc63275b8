// WorkerTable: the broker's view of its connected workers, without I/O.
//
//   auto outcome = table.OnRegister(identity, reg, now_ms);  // Register message
//   auto workers = table.Candidates(0);             // who may get jobs (ScheduleStore)
//   auto jobs = table.Remove(identity);             // the gateway declared it dead
//
// Liveness is the WorkerGateway's (WorkerLiveness): this table learns of
// registrations, heartbeats and deaths from it. Which worker runs a job is
// decided in Redis from the slot leases of every broker (ScheduleStore);
// this table says which workers are alive, not draining and not refusing
// work, and which jobs this broker sent each.
// Belongs to the dispatcher's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "broker/scheduler/runtime_catalog.hpp"
#include "broker/store/schedule_store.hpp"
#include "common/protocol/messages.hpp"

namespace kiln::broker {

using Clock = std::chrono::steady_clock;

struct WorkerInfo {
  std::string identity;                           // ZeroMQ routing id (the worker id)
  common::protocol::Register reg;                 // without held_jobs, packages, runtime_versions
  std::shared_ptr<const RuntimeCatalog> catalog;  // from the Register; never null
  std::map<std::string, int64_t> running;         // job ids this broker sent -> when (wall ms)
  // Slots taken by other brokers' jobs, from the worker's heartbeats (every
  // worker serves every broker).
  uint32_t external_busy = 0;
  bool draining = false;
  bool refusing = false;  // refused a job for want of a slot; cleared by its next heartbeat
  int64_t registered_at_ms = 0;
  int64_t last_seen_ms = 0;  // wall clock, for display
  // A session execution the scheduler chose this worker for before this
  // time (wall ms) was meant for an older incarnation, or for sessions that
  // are lost: it must not start here (a fresh interpreter would run it
  // without its state). INT64_MAX until the sessions' loss is stored.
  int64_t sessions_from_ms = 0;
};

// A job sent this recently may cross a `register` the worker built before
// it arrived: missing from held_jobs, it is not lost yet (its result, or the
// overdue check, ends it).
inline constexpr int64_t kRegisterCrossingMs = 2000;

// What a (re)registration means for the jobs this broker sent the worker.
struct RegisterOutcome {
  // Jobs it no longer holds: a restarted worker has lost them all; one that
  // reconnected (same incarnation) those missing from its held_jobs and sent
  // longer than kRegisterCrossingMs ago.
  std::vector<std::string> lost;
  // A new incarnation of a worker this table knew: its sessions are gone too.
  bool restarted = false;
  // Not a reconnect of the incarnation this table knew (new here, or
  // restarted): sessions_from_ms waits for SetSessionsFrom.
  bool fresh = false;
};

class WorkerTable {
 public:
  RegisterOutcome OnRegister(const std::string& identity, const common::protocol::Register& reg,
                             int64_t now_ms);
  // False when the identity is unknown (the worker must register again).
  bool OnHeartbeat(const std::string& identity, const common::protocol::Heartbeat& hb,
                   int64_t now_ms);
  // Removes the worker; returns the jobs it was running.
  std::vector<std::string> Remove(const std::string& identity);

  // Live workers that may be sent jobs: not draining, not refusing. Their
  // slot limit is the smaller of their own slots and `slot_cap` (0: none).
  std::vector<WorkerSlots> Candidates(uint32_t slot_cap) const;
  void Assign(const std::string& identity, const std::string& job_id, int64_t now_ms);
  void Release(const std::string& identity, const std::string& job_id);
  // The worker refused a job for want of a slot: send it nothing until its
  // next heartbeat.
  void MarkFull(const std::string& identity);
  // See WorkerInfo::sessions_from_ms. Unknown identities are ignored.
  void SetSessionsFrom(const std::string& identity, int64_t ms);
  // Whether a session execution chosen for the worker at decided_ms may go
  // to it (false for unknown workers).
  bool SessionsFrom(const std::string& identity, int64_t decided_ms) const;
  // Slots of the worker in use, by this broker's jobs and others'.
  static size_t Busy(const WorkerInfo& w) { return w.running.size() + w.external_busy; }

  bool Known(const std::string& identity) const { return workers_.count(identity) != 0; }
  size_t size() const { return workers_.size(); }
  const std::map<std::string, WorkerInfo>& workers() const { return workers_; }

 private:
  std::map<std::string, WorkerInfo> workers_;
};

}  // namespace kiln::broker
