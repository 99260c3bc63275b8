// ToolRelay: the broker's side of tool callbacks (docs/api.md, "Tool
// callbacks"). A worker's ToolCall is checked here — the job is running on
// that worker, the tool is one it declared, the arguments match the tool's
// schema, the job has calls left — then opened in Redis (ToolStore), which
// shows it to the job's followers as a tool_call event. A client's answer
// (POST /v1/executions/{id}/tool-results, on any broker) is taken once and
// sent to the job's worker, which hands it to the waiting code.
//
//   ToolRelay relay(&jobs, &tools, &metrics);
//   dopts.on_tool_call = [&](auto& w, auto c) { relay.Post(w, std::move(c)); };
//   relay.Attach(dispatcher);                           // how answers reach workers
//   std::jthread t([&](std::stop_token st) { relay.Run(st); });
//   ASSIGN_OR_RETURN(nlohmann::json ok, relay.Answer(caller, id, body));   // HTTP thread
//
// Calls are checked on Run()'s thread, never on the gateway's (which must
// not wait on Redis): Post() only queues, at most kMaxQueued; past that a
// call is refused at once (ToolUnavailable), so a flood from one worker
// costs a bounded queue. Post() and Answer() are thread-safe; Run() belongs
// to one thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "broker/metrics/broker_metrics.hpp"
#include "broker/scheduler/dispatcher.hpp"
#include "broker/service/submit_service.hpp"
#include "broker/store/job_store.hpp"
#include "broker/store/tool_store.hpp"
#include "broker/tools/tool_spec.hpp"
#include "common/protocol/messages.hpp"
#include "common/status.hpp"

namespace kiln::broker {

class ToolRelay {
 public:
  static constexpr size_t kMaxQueued = 1024;
  // Declarations of recent jobs kept, so a loop of calls loads its job's once.
  static constexpr size_t kMaxCachedJobs = 256;

  ToolRelay(JobStore* jobs, ToolStore* tools, BrokerMetrics* metrics)
      : jobs_(jobs), tools_(tools), metrics_(metrics) {}

  void Attach(Dispatcher* dispatcher) { dispatcher_ = dispatcher; }
  // A worker's call (the gateway's thread).
  void Post(const std::string& worker, common::protocol::ToolCall call);
  void Run(std::stop_token stop);
  // A client's answer; the body is `{"call_id", "result" | "error"}`.
  // Returns `{"call_id", "accepted": true}`.
  common::StatusOr<nlohmann::json> Answer(const Caller& caller, const std::string& job_id,
                                          std::string_view body);
  // The same, parsed already (the WebSocket channel's tool_result): an
  // object with exactly those fields.
  common::StatusOr<nlohmann::json> AnswerParsed(const Caller& caller, const std::string& job_id,
                                                const nlohmann::json& req);

 private:
  struct JobTools {
    std::string tenant;
    ToolSchemas schemas;  // compiled once per job
    uint64_t timeout_ms = 0;
  };
  void Handle(const std::string& worker, const common::protocol::ToolCall& call);
  common::StatusOr<std::shared_ptr<const JobTools>> ToolsOf(const std::string& job_id);
  void Refuse(const std::string& worker, const common::protocol::ToolCall& call, const char* type,
              std::string why);
  void Count(const std::string& tenant, const char* outcome);

  JobStore* jobs_;
  ToolStore* tools_;
  BrokerMetrics* metrics_;
  Dispatcher* dispatcher_ = nullptr;

  std::mutex mu_;
  std::condition_variable_any wake_;
  std::deque<std::pair<std::string, common::protocol::ToolCall>> queue_;  // guarded by mu_

  // Run()'s own.
  std::map<std::string, std::shared_ptr<const JobTools>> cache_;
};

}  // namespace kiln::broker
