// ToolStore: a job's tool calls in Redis (docs/api.md, "Tool callbacks"),
// shared by every broker. A call is opened by the broker its worker sent it
// to, and answered through whichever broker the client asked; each is
// answered at most once, before its deadline, while its job runs. Opening
// and answering also put tool_call / tool_result entries on the job's
// output stream, where the SSE and native followers find them.
//
//   ASSIGN_OR_RETURN(std::string call_id, store.Open({...}));      // "c1"
//   ASSIGN_OR_RETURN(ToolStore::Answered a, store.Answer(id, tenant, "c1", true, sha));
//   ASSIGN_OR_RETURN(auto calls, store.Calls(id));                 // the audit entry's
//
// Key: keys::Tools(job id), a hash kept as long as the job. One round trip
// each. Thread-safe (each call leases its own connection).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "broker/store/redis_connection.hpp"
#include "common/status.hpp"

namespace kiln::broker {

class ToolStore {
 public:
  ToolStore(RedisPool* pool, uint64_t ttl_s) : pool_(pool), ttl_s_(std::to_string(ttl_s)) {}

  struct Call {
    std::string job_id;
    std::string worker;
    uint64_t worker_call = 0;
    std::string name;
    std::string arguments_json;
    std::string arguments_sha256;
    uint64_t timeout_ms = 0;
    uint64_t max_calls = 0;
  };
  // The call's id ("c<n>"). NOT_FOUND: the job is not running (on that
  // worker); LIMIT_EXCEEDED: the job made max_calls already.
  common::StatusOr<std::string> Open(const Call& call);
  // OK when the job is running on `worker` (what Open checks too);
  // NOT_FOUND otherwise.
  common::Status RunsOn(const std::string& job_id, const std::string& worker);

  struct Answered {
    std::string worker;
    uint64_t worker_call = 0;
  };
  // NOT_FOUND: no such job of the tenant's, or no such call;
  // TOOL_CALL_CLOSED: answered already, timed out, or the job ended.
  common::StatusOr<Answered> Answer(const std::string& job_id, const std::string& tenant,
                                    const std::string& call_id, bool ok,
                                    const std::string& answer_sha256);

  // What the audit trail keeps of each call, in call order.
  struct Logged {
    std::string call_id;
    std::string name;
    std::string state;  // "answered", "error" or "unanswered" (timed out, or the job ended)
    std::string arguments_sha256;
    std::string answer_sha256;  // empty when unanswered
  };
  common::StatusOr<std::vector<Logged>> Calls(const std::string& job_id);

 private:
  RedisPool* pool_;
  std::string ttl_s_;
};

}  // namespace kiln::broker
