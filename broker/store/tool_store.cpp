#include "broker/store/tool_store.hpp"

#include <algorithm>
#include <cstdlib>

#include "broker/store/job_store.hpp"
#include "broker/store/redis_keys.hpp"
#include "broker/store/tool_scripts.hpp"

namespace kiln::broker {

using common::Code;
using common::Status;

common::StatusOr<std::string> ToolStore::Open(const Call& c) {
  auto conn = pool_->Acquire();
  ASSIGN_OR_RETURN(
      RedisReply r,
      conn->Eval(scripts::OpenToolCall(),
                 {c.job_id, c.worker, std::to_string(c.worker_call), c.name, c.arguments_json,
                  c.arguments_sha256, std::to_string(c.timeout_ms), ttl_s_,
                  std::to_string(c.max_calls), std::to_string(JobStore::kMaxChunksKept)}));
  if (r.elements.empty()) return common::Internal("redis: unexpected reply opening a tool call");
  const int64_t n = r.elements[0].integer;
  if (n == -1) return Status(Code::kNotFound, "the job is not running");
  if (n == -2) return Status(Code::kNotFound, "the job runs on another worker");
  if (n == -3) {
    return Status(Code::kLimitExceeded,
                  "at most " + std::to_string(c.max_calls) + " tool calls per execution");
  }
  return "c" + std::to_string(n);
}

common::Status ToolStore::RunsOn(const std::string& job_id, const std::string& worker) {
  auto conn = pool_->Acquire();
  ASSIGN_OR_RETURN(RedisReply r,
                   conn->Command({"HMGET", JobStore::JobKey(job_id), "status", "worker"}));
  if (r.elements.size() != 2 || r.elements[0].str != "running" || r.elements[1].str != worker) {
    return Status(Code::kNotFound, "the job is not running on this worker");
  }
  return Status::Ok();
}

common::StatusOr<ToolStore::Answered> ToolStore::Answer(const std::string& job_id,
                                                        const std::string& tenant,
                                                        const std::string& call_id, bool ok,
                                                        const std::string& answer_sha256) {
  auto conn = pool_->Acquire();
  ASSIGN_OR_RETURN(RedisReply r, conn->Eval(scripts::AnswerToolCall(),
                                            {job_id, tenant, call_id, ok ? "a" : "e", answer_sha256,
                                             std::to_string(JobStore::kMaxChunksKept)}));
  if (r.elements.empty()) return common::Internal("redis: unexpected reply answering a tool call");
  switch (r.elements[0].integer) {
    case 1:
      if (r.elements.size() != 3) break;
      return Answered{r.elements[1].str, std::strtoull(r.elements[2].str.c_str(), nullptr, 10)};
    case -1:
      return Status(Code::kNotFound, "no tool call " + call_id + " in execution " + job_id);
    case -2:
      return Status(Code::kToolCallClosed, "tool call " + call_id + " was answered already");
    case -3:
      return Status(Code::kToolCallClosed, "tool call " + call_id + " timed out");
    case -4:
      return Status(Code::kToolCallClosed, "execution " + job_id + " is no longer running");
  }
  return common::Internal("redis: unexpected reply answering a tool call");
}

common::StatusOr<std::vector<ToolStore::Logged>> ToolStore::Calls(const std::string& job_id) {
  auto conn = pool_->Acquire();
  ASSIGN_OR_RETURN(RedisReply r, conn->Command({"HGETALL", keys::Tools(job_id)}));
  std::vector<std::pair<uint64_t, Logged>> calls;
  for (size_t i = 0; i + 1 < r.elements.size(); i += 2) {
    const std::string& field = r.elements[i].str;
    if (field.size() < 2 || field[0] != 'c') continue;
    std::vector<std::string> parts;
    size_t start = 0;
    const std::string& v = r.elements[i + 1].str;
    for (size_t bar; (bar = v.find('|', start)) != std::string::npos; start = bar + 1) {
      parts.push_back(v.substr(start, bar - start));
    }
    parts.push_back(v.substr(start));
    if (parts.size() != 7) continue;
    const std::string state = parts[0] == "a"   ? "answered"
                              : parts[0] == "e" ? "error"
                                                : "unanswered";
    calls.push_back({std::strtoull(field.c_str() + 1, nullptr, 10),
                     Logged{field, parts[4], state, parts[5], parts[6]}});
  }
  std::sort(calls.begin(), calls.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Logged> out;
  for (auto& [n, l] : calls) out.push_back(std::move(l));
  return out;
}

}  // namespace kiln::broker
