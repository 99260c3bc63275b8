#include "broker/tools/tool_relay.hpp"

#include "common/audit/sha256.hpp"
#include "common/json/bounded_json.hpp"
#include "common/log/logging.hpp"

namespace kiln::broker {

namespace protocol = common::protocol;
using common::Code;
using common::Status;

namespace {
const common::SubsystemLog kLog("tools");
constexpr uint32_t kHostileLines = 10;
constexpr auto kLogWindow = std::chrono::seconds(10);

// A call's id as the API names it: "c" and its number.
bool IsCallId(std::string_view s) {
  if (s.size() < 2 || s.size() > 11 || s[0] != 'c' || s[1] == '0') return false;
  for (char c : s.substr(1)) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}
}  // namespace

void ToolRelay::Post(const std::string& worker, protocol::ToolCall call) {
  {
    std::lock_guard lock(mu_);
    if (queue_.size() < kMaxQueued) {
      queue_.emplace_back(worker, std::move(call));
      wake_.notify_one();
      return;
    }
  }
  Refuse(worker, call, "ToolUnavailable", "the broker has too many tool calls to check; try again");
}

void ToolRelay::Run(std::stop_token stop) {
  while (!stop.stop_requested()) {
    std::deque<std::pair<std::string, protocol::ToolCall>> batch;
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, stop, [&] { return !queue_.empty(); });
      batch.swap(queue_);
    }
    for (const auto& [worker, call] : batch) Handle(worker, call);
  }
}

common::StatusOr<std::shared_ptr<const ToolRelay::JobTools>> ToolRelay::ToolsOf(
    const std::string& job_id) {
  if (auto it = cache_.find(job_id); it != cache_.end()) return it->second;
  ASSIGN_OR_RETURN(JobSpec spec, jobs_->LoadSpec(job_id));
  ASSIGN_OR_RETURN(ToolSchemas schemas, ToolSchemas::Create(spec.tools));
  auto t =
      std::make_shared<JobTools>(JobTools{spec.tenant, std::move(schemas), spec.ToolTimeoutMs()});
  if (cache_.size() >= kMaxCachedJobs) cache_.clear();  // recent jobs load theirs again
  cache_.emplace(job_id, t);
  return std::shared_ptr<const JobTools>(t);
}

void ToolRelay::Handle(const std::string& worker, const protocol::ToolCall& call) {
  auto tools = ToolsOf(call.job_id);
  if (!tools.ok()) {
    // Not a job (a worker's invention), or Redis is away: either way the
    // call cannot be shown to anyone.
    return Refuse(worker, call, "ToolUnavailable",
                  tools.status().code() == Code::kNotFound ? "no such execution"
                                                           : "the broker cannot reach its store");
  }
  const JobTools& job = **tools;
  auto args = common::ParseJson(call.arguments_json, {.max_depth = 64, .max_values = 1u << 16},
                                "arguments");
  Status valid = args.ok() ? job.schemas.Validate(call.name, *args) : args.status();
  if (!valid.ok()) {
    // Why a call does not match its schema tells of the schema: only the
    // worker running the job may learn it (Open checks that of the calls
    // it takes; a refused one never gets there).
    if (!tools_->RunsOn(call.job_id, worker).ok()) {
      return Refuse(worker, call, "ToolUnavailable", "no such execution on this worker");
    }
    Count(job.tenant, "refused");
    return Refuse(worker, call, "ToolRefused", valid.message());
  }
  auto opened = tools_->Open({.job_id = call.job_id,
                              .worker = worker,
                              .worker_call = call.call,
                              .name = call.name,
                              .arguments_json = common::DumpJson(*args),
                              .arguments_sha256 = common::Sha256Hex(call.arguments_json),
                              .timeout_ms = job.timeout_ms,
                              .max_calls = kMaxToolCalls});
  if (!opened.ok()) {
    if (opened.status().code() == Code::kLimitExceeded) {
      Count(job.tenant, "refused");
      return Refuse(worker, call, "ToolRefused", opened.status().message());
    }
    return Refuse(worker, call, "ToolUnavailable", opened.status().message());
  }
  Count(job.tenant, "forwarded");
}

void ToolRelay::Refuse(const std::string& worker, const protocol::ToolCall& call, const char* type,
                       std::string why) {
  static common::LogLimiter limit(kHostileLines, kLogWindow);
  kLog.Info(limit, {.job = call.job_id, .worker = worker}, "tool call {} refused: {}", call.call,
            why);
  if (why.size() > protocol::kMaxToolErrorBytes) why.resize(protocol::kMaxToolErrorBytes);
  if (!dispatcher_) return;
  dispatcher_->SendToWorker(worker, protocol::ToolResult{.job_id = call.job_id,
                                                         .call = call.call,
                                                         .error_type = type,
                                                         .error_message = std::move(why)});
}

void ToolRelay::Count(const std::string& tenant, const char* outcome) {
  if (metrics_) metrics_->ToolCall(tenant, outcome);
}

common::StatusOr<nlohmann::json> ToolRelay::Answer(const Caller& caller, const std::string& job_id,
                                                   std::string_view body) {
  // The result may nest as deep as any JSON the code gets; the bound keeps
  // dump() and the worker's parse safe.
  ASSIGN_OR_RETURN(nlohmann::json req, common::ParseJson(body, {.max_depth = 64}, "request body"));
  if (!req.is_object()) return common::InvalidRequest("request body: expected a JSON object");
  return AnswerParsed(caller, job_id, req);
}

common::StatusOr<nlohmann::json> ToolRelay::AnswerParsed(const Caller& caller,
                                                         const std::string& job_id,
                                                         const nlohmann::json& req) {
  if (caller.admin) return Status(Code::kForbidden, "admin tokens do not answer tool calls");
  for (const auto& [key, value] : req.items()) {
    if (key != "call_id" && key != "result" && key != "error") {
      return common::InvalidRequest("unknown field: " + key.substr(0, 64));
    }
  }
  auto id = req.find("call_id");
  if (id == req.end() || !id->is_string() || !IsCallId(id->get_ref<const std::string&>())) {
    return common::InvalidRequest("call_id: expected the call's id, \"c\" and a number");
  }
  const std::string call_id = id->get<std::string>();
  const auto result = req.find("result");
  const auto error = req.find("error");
  if ((result == req.end()) == (error == req.end())) {
    return common::InvalidRequest("exactly one of result and error");
  }
  protocol::ToolResult answer{.job_id = job_id};
  if (result != req.end()) {
    answer.ok = true;
    answer.result_json = common::DumpJson(*result);
    if (answer.result_json.size() > protocol::kMaxToolResultBytes) {
      return Status(Code::kLimitExceeded, "result: " + std::to_string(answer.result_json.size()) +
                                              " bytes, above the maximum of " +
                                              std::to_string(protocol::kMaxToolResultBytes));
    }
  } else {
    if (!error->is_string()) return common::InvalidRequest("error: expected a string");
    answer.error_type = "ToolError";
    answer.error_message = error->get<std::string>();
    if (answer.error_message.size() > protocol::kMaxToolErrorBytes) {
      return Status(
          Code::kLimitExceeded,
          "error: above the maximum of " + std::to_string(protocol::kMaxToolErrorBytes) + " bytes");
    }
  }
  const std::string digest =
      common::Sha256Hex(answer.ok ? answer.result_json : answer.error_message);
  ASSIGN_OR_RETURN(ToolStore::Answered to,
                   tools_->Answer(job_id, caller.tenant, call_id, answer.ok, digest));
  answer.call = to.worker_call;
  Count(caller.tenant, answer.ok ? "answered" : "error");
  if (dispatcher_) dispatcher_->SendToWorker(to.worker, std::move(answer));
  return nlohmann::json{{"call_id", call_id}, {"accepted", true}};
}

}  // namespace kiln::broker
