// SessionStore: the sessions every broker shares through Redis — listing,
// deleting, and losing the sessions of a dead worker. Sessions are created
// and bound to a worker by ScheduleStore::Submit (first use); see
// docs/architecture.md ("Sessions") for their keys and states.
//
//   SessionStore sessions(pool, /*ttl_ms=*/600000);
//   ASSIGN_OR_RETURN(auto list, sessions.List("acme", /*conversation=*/""));
//
// One round trip per call. Thread-safe.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "broker/store/redis_connection.hpp"
#include "common/status.hpp"

namespace kiln::broker {

struct SessionInfo {
  std::string id;
  std::string tenant;
  std::string language;
  std::string worker;  // empty until its first execution starts
  std::string state;   // idle, busy, lost
  std::string conversation_id;
  uint64_t epoch = 1;  // SessionEpoch::generation (1 if the session predates generations)
  int64_t created_ms = 0;
  int64_t last_used_ms = 0;
  uint64_t executions = 0;

  nlohmann::json ToJson() const;
};

struct DeletedSession {
  std::string worker;
  std::string running_job;               // to cancel; empty if none
  std::vector<std::string> queued_jobs;  // to end `cancelled`
};

class SessionStore {
 public:
  SessionStore(RedisPool* pool, uint64_t ttl_ms) : pool_(pool), ttl_ms_(ttl_ms) {}

  common::StatusOr<std::vector<SessionInfo>> List(const std::string& tenant,
                                                  const std::string& conversation);
  // SESSION_NOT_FOUND for a missing session (ids are the tenant's own:
  // another tenant's session of the same name is not this one).
  common::StatusOr<DeletedSession> Delete(const std::string& tenant, const std::string& id);
  // The worker died: its sessions become `lost`. Returns their queued jobs,
  // which the caller ends SESSION_LOST.
  common::StatusOr<std::vector<std::string>> LoseWorker(const std::string& worker);

 private:
  RedisPool* pool_;
  uint64_t ttl_ms_;
};

}  // namespace kiln::broker
