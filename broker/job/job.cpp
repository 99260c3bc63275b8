#include "broker/job/job.hpp"

#include <array>
#include <charconv>
#include <utility>

#include "broker/job/limits_json.hpp"
#include "common/audit/sha256.hpp"
#include "common/base64.hpp"
#include "common/json/bounded_json.hpp"
#include "common/protocol/session_key.hpp"
#include "common/rich_output.hpp"

namespace kiln::broker {
namespace {

using common::Code;
using nlohmann::json;
namespace protocol = common::protocol;

constexpr std::array<std::pair<JobStatus, const char*>, 10> kStatusNames{{
    {JobStatus::kQueued, "queued"},
    {JobStatus::kAwaitingApproval, "awaiting_approval"},
    {JobStatus::kRunning, "running"},
    {JobStatus::kSucceeded, "succeeded"},
    {JobStatus::kFailed, "failed"},
    {JobStatus::kTimedOut, "timed_out"},
    {JobStatus::kMemoryExceeded, "memory_exceeded"},
    {JobStatus::kCancelled, "cancelled"},
    {JobStatus::kRejected, "rejected"},
    {JobStatus::kError, "error"},
}};

json FilesJson(const std::vector<protocol::FileEntry>& files) {
  json a = json::array();
  for (const auto& f : files) {
    a.push_back({{"path", f.path},
                 {"content_base64", common::Base64Encode(f.content)},
                 {"size", f.content.size()}});
  }
  return a;
}

common::StatusOr<std::vector<protocol::FileEntry>> FilesFromJson(const json& a) {
  std::vector<protocol::FileEntry> files;
  for (const auto& f : a) {
    ASSIGN_OR_RETURN(std::string content,
                     common::Base64Decode(f.at("content_base64").get<std::string>()));
    files.push_back({f.at("path").get<std::string>(), std::move(content)});
  }
  return files;
}

// Text mimes as a string ("text"), the rest as base64 ("content_base64"),
// like `files`; "size" is the data's length in bytes either way.
json OutputsJson(const std::vector<protocol::RichOutput>& outputs) {
  json a = json::array();
  for (const auto& o : outputs) {
    json e = {{"mime", o.mime}, {"size", o.data.size()}};
    if (common::IsTextMime(o.mime)) {
      e["text"] = o.data;
    } else {
      e["content_base64"] = common::Base64Encode(o.data);
    }
    a.push_back(std::move(e));
  }
  return a;
}

common::StatusOr<std::vector<protocol::RichOutput>> OutputsFromJson(const json& a) {
  std::vector<protocol::RichOutput> outputs;
  for (const auto& o : a) {
    protocol::RichOutput out{o.at("mime").get<std::string>(), ""};
    if (auto t = o.find("text"); t != o.end()) {
      out.data = t->get<std::string>();
    } else {
      ASSIGN_OR_RETURN(out.data, common::Base64Decode(o.at("content_base64").get<std::string>()));
    }
    outputs.push_back(std::move(out));
  }
  return outputs;
}

template <typename T>
json Opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

template <typename T>
std::optional<T> OptFrom(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  return it->get<T>();
}

}  // namespace

// The records and specs on every job's path are built key by key: an
// initializer list of pairs builds (and copies) an array per pair before
// the object, over twice the work (docs/performance.md). Keys sort the same.
json LimitsJson(const protocol::Limits& l) {
  json j = json::object();
  j["timeout_ms"] = l.timeout_ms;
  j["memory_mb"] = l.memory_mb;
  j["cpu_ms"] = l.cpu_ms;
  j["max_output_bytes"] = l.max_output_bytes;
  j["max_pids"] = l.max_pids;
  return j;
}

const char* JobStatusName(JobStatus s) {
  for (const auto& [st, name] : kStatusNames) {
    if (st == s) return name;
  }
  return "error";
}

common::StatusOr<JobStatus> ParseJobStatus(std::string_view s) {
  for (const auto& [st, name] : kStatusNames) {
    if (s == name) return st;
  }
  return common::InvalidRequest("unknown job status '" + std::string(s) + "'");
}

bool IsTerminal(JobStatus s) {
  return s != JobStatus::kQueued && s != JobStatus::kAwaitingApproval && s != JobStatus::kRunning;
}

JobSpec JobSpec::Excerpt() const {
  if (excerpt_of) return *this;
  JobSpec e;
  e.id = id;
  e.tenant = tenant;
  e.language = language;
  e.isolation = isolation;
  e.session_id = session_id;
  e.conversation_id = conversation_id;
  e.priority = priority;
  e.warnings = warnings;
  e.limits = limits;
  e.wait = wait;
  e.created_ms = created_ms;
  e.callback_url = callback_url;
  e.excerpt_of =
      SubmittedDigest{code.size(), common::Sha256Hex(code), common::Sha256Hex(input_json)};
  if (code.size() <= kCodeExcerptBytes) {
    e.code = code;
  } else {
    size_t cut = kCodeExcerptBytes;
    // Back off to the start of a UTF-8 character (continuation bytes are 10xxxxxx).
    while (cut > kCodeExcerptBytes - 4 && (static_cast<unsigned char>(code[cut]) & 0xC0) == 0x80) {
      --cut;
    }
    e.code = code.substr(0, cut) + "\n[kiln: excerpt: the first " + std::to_string(cut) + " of " +
             std::to_string(code.size()) + " bytes; " + std::to_string(code.size() - cut) +
             " bytes cut]";
  }
  return e;
}

json JobSpec::ToJson() const {
  json j = json::object();
  j["id"] = id;
  j["tenant"] = tenant;
  j["language"] = language;
  j["isolation"] = isolation;
  j["code"] = code;
  j["session_id"] = session_id;
  j["conversation_id"] = conversation_id;
  j["priority"] = priority;
  j["warnings"] = warnings;
  j["input_json"] = input_json;
  j["env"] = env;
  j["files"] = FilesJson(files);
  j["collect"] = collect;
  j["stdin"] = stdin_data;
  j["packages"] = packages;
  j["limits"] = LimitsJson(limits);
  j["wait"] = wait;
  j["created_ms"] = created_ms;
  if (network) {
    j["network"] = {{"allow", network_allow},
                    {"max_bytes", network_max_bytes},
                    {"max_connections", network_max_connections}};
  }
  if (!callback_url.empty()) j["callback_url"] = callback_url;
  if (!tools.empty()) {
    j["tools"] = ToolDeclsToJson(tools);
    j["tool_timeout_ms"] = tool_timeout_ms;
  }
  if (excerpt_of) {
    j["excerpt_of"] = {{"code_bytes", excerpt_of->code_bytes},
                       {"code_sha256", excerpt_of->code_sha256},
                       {"input_sha256", excerpt_of->input_sha256}};
  }
  return j;
}

common::StatusOr<JobSpec> JobSpec::FromJson(const json& j) {
  try {
    JobSpec s;
    s.id = j.at("id").get<std::string>();
    s.tenant = j.at("tenant").get<std::string>();
    s.language = j.at("language").get<std::string>();
    // Specs stored before isolation levels existed ran at the only level there was.
    s.isolation = j.value("isolation", std::string(kStandardIsolation));
    s.code = j.at("code").get<std::string>();
    s.session_id = j.at("session_id").get<std::string>();
    s.conversation_id = j.value("conversation_id", "");
    s.priority = j.value("priority", 0u);
    s.warnings = j.value("warnings", std::vector<std::string>{});
    s.input_json = j.at("input_json").get<std::string>();
    s.env = j.at("env").get<std::map<std::string, std::string>>();
    ASSIGN_OR_RETURN(s.files, FilesFromJson(j.at("files")));
    s.collect = j.at("collect").get<std::vector<std::string>>();
    s.stdin_data = j.value("stdin", "");  // absent in specs stored before stdin existed
    s.packages = j.value("packages", std::vector<std::string>{});
    s.callback_url = j.value("callback_url", "");
    if (auto t = j.find("tools"); t != j.end() && !t->is_null()) {
      ASSIGN_OR_RETURN(s.tools, ToolDeclsFromJson(*t));
      s.tool_timeout_ms = j.value("tool_timeout_ms", uint64_t{0});
    }
    if (auto n = j.find("network"); n != j.end() && !n->is_null()) {
      s.network = true;
      s.network_allow = n->at("allow").get<std::vector<std::string>>();
      s.network_max_bytes = n->at("max_bytes").get<uint64_t>();
      s.network_max_connections = n->at("max_connections").get<uint64_t>();
    }
    const json& l = j.at("limits");
    s.limits = {l.at("timeout_ms").get<uint64_t>(), l.at("memory_mb").get<uint64_t>(),
                l.at("cpu_ms").get<uint64_t>(), l.at("max_output_bytes").get<uint64_t>(),
                l.at("max_pids").get<uint64_t>()};
    s.wait = j.at("wait").get<bool>();
    s.created_ms = j.at("created_ms").get<int64_t>();
    if (auto x = j.find("excerpt_of"); x != j.end() && !x->is_null()) {
      s.excerpt_of = SubmittedDigest{x->at("code_bytes").get<uint64_t>(),
                                     x->at("code_sha256").get<std::string>(),
                                     x->at("input_sha256").get<std::string>()};
    }
    return s;
  } catch (const json::exception& e) {
    return common::Internal(std::string("stored job spec is damaged: ") + e.what());
  }
}

protocol::Execute JobSpec::ToExecute() const {
  protocol::Execute e;
  e.job_id = id;
  e.tenant = tenant;
  e.language = language;
  e.isolation = WireIsolation(isolation);
  e.code = code;
  e.session_id = session_id.empty() ? "" : common::protocol::SessionKey(tenant, session_id);
  e.input_json = input_json;
  e.env = env;
  e.files = files;
  e.collect = collect;
  e.stdin_data = stdin_data;
  e.packages = packages;
  if (network) {
    e.network_allow = network_allow;
    e.network_max_bytes = network_max_bytes;
    e.network_max_connections = network_max_connections;
  }
  e.limits = limits;
  for (const ToolDecl& t : tools) e.tools.push_back(t.name);
  if (!tools.empty()) e.tool_timeout_ms = ToolTimeoutMs();
  return e;
}

uint64_t JobSpec::ToolTimeoutMs() const {
  if (tool_timeout_ms != 0) return tool_timeout_ms;
  return limits.timeout_ms ? std::min<uint64_t>(kDefaultToolTimeoutMs, limits.timeout_ms)
                           : kDefaultToolTimeoutMs;
}

std::string SessionEpoch::ToString() const {
  return std::to_string(incarnation) + "/" + std::to_string(generation);
}

std::optional<SessionEpoch> SessionEpoch::Parse(std::string_view s) {
  auto number = [](std::string_view d, uint64_t* out) {
    auto [end, ec] = std::from_chars(d.data(), d.data() + d.size(), *out);
    return ec == std::errc() && end == d.data() + d.size() && !d.empty();
  };
  SessionEpoch e;
  const size_t slash = s.find('/');
  if (slash == std::string_view::npos) {
    if (!number(s, &e.incarnation)) return std::nullopt;
    e.generation = 1;
    return e;
  }
  if (!number(s.substr(0, slash), &e.incarnation) || !number(s.substr(slash + 1), &e.generation)) {
    return std::nullopt;
  }
  return e;
}

JobRecord JobRecord::Queued(const JobSpec& spec) {
  JobRecord r;
  r.id = spec.id;
  r.status = JobStatus::kQueued;
  r.language = spec.language;
  r.isolation = spec.isolation;
  r.session_id = spec.session_id;
  r.tenant = spec.tenant;
  r.created_ms = spec.created_ms;
  r.warnings = spec.warnings;
  return r;
}

size_t JobRecord::ApproxJsonBytes() const {
  size_t n = 1024 + stdout_data.size() + stderr_data.size() + result_json.size();
  for (const auto& f : files) n += 64 + f.path.size() + (f.content.size() + 2) / 3 * 4;
  for (const auto& o : outputs) n += 64 + o.mime.size() + (o.data.size() + 2) / 3 * 4;
  for (const auto& w : warnings) n += 8 + w.size();
  return n;
}

json JobRecord::ToJson() const {
  auto or_null = [](const std::string& v) { return v.empty() ? json(nullptr) : json(v); };
  json j = json::object();
  j["id"] = id;
  j["status"] = JobStatusName(status);
  j["language"] = language;
  j["session_id"] = or_null(session_id);
  j["tenant"] = tenant;
  j["exit_code"] = Opt(exit_code);
  j["signal"] = Opt(signal);
  j["stdout"] = stdout_data;
  j["stderr"] = stderr_data;
  j["truncated"] = truncated;
  j["result"] = nullptr;
  j["error"] = nullptr;
  j["duration_ms"] = Opt(duration_ms);
  j["queued_ms"] = Opt(queued_ms);
  j["usage"] = nullptr;
  j["worker"] = or_null(worker);
  j["files"] = FilesJson(files);
  j["files_truncated"] = files_truncated;
  j["files_omitted"] = files_omitted;
  j["outputs"] = OutputsJson(outputs);
  j["outputs_truncated"] = outputs_truncated;
  j["session_epoch"] = Opt(session_epoch);
  j["queue_position"] = Opt(queue_position);
  j["wait_reason"] = or_null(wait_reason);
  j["redactions"] = redactions;
  j["warnings"] = warnings;
  j["end_reason"] = or_null(end_reason);
  j["created_at_ms"] = created_ms;
  j["started_at_ms"] = started_ms ? json(started_ms) : json(nullptr);
  j["finished_at_ms"] = finished_ms ? json(finished_ms) : json(nullptr);
  if (!result_json.empty()) {
    // Bounded: a result deeper than the limit (only a hostile worker sends
    // one; the worker's own parse refuses it) reads as null.
    auto result = common::ParseJson(result_json);
    j["result"] = result.ok() ? std::move(*result) : json(nullptr);
  }
  if (error) {
    json e = {{"code", error->code}, {"message", error->message}, {"retryable", error->retryable}};
    if (!error->type.empty()) e["type"] = error->type;
    if (!error->traceback.empty()) e["traceback"] = error->traceback;
    j["error"] = std::move(e);
  }
  // Only where it is news: records of standard jobs read as they always did.
  if (NormalizeIsolation(isolation) != kStandardIsolation) j["isolation"] = isolation;
  if (network) j["network"] = network->ToJson();
  if (cpu_ms || max_rss_kb) {
    j["usage"] = {{"cpu_ms", Opt(cpu_ms)}, {"max_rss_kb", Opt(max_rss_kb)}};
  }
  return j;
}

common::StatusOr<JobRecord> JobRecord::FromJson(const json& j) {
  try {
    JobRecord r;
    r.id = j.at("id").get<std::string>();
    ASSIGN_OR_RETURN(r.status, ParseJobStatus(j.at("status").get<std::string>()));
    r.language = j.at("language").get<std::string>();
    r.isolation = j.value("isolation", std::string(kStandardIsolation));
    r.session_id = j.at("session_id").is_null() ? "" : j.at("session_id").get<std::string>();
    r.tenant = j.at("tenant").get<std::string>();
    r.exit_code = OptFrom<int32_t>(j, "exit_code");
    r.signal = OptFrom<int32_t>(j, "signal");
    r.stdout_data = j.at("stdout").get<std::string>();
    r.stderr_data = j.at("stderr").get<std::string>();
    r.truncated = j.at("truncated").get<bool>();
    if (!j.at("result").is_null()) r.result_json = j.at("result").dump();
    if (!j.at("error").is_null()) {
      const json& e = j.at("error");
      r.error =
          JobError{e.at("code").get<std::string>(), e.at("message").get<std::string>(),
                   e.at("retryable").get<bool>(), e.value("type", ""), e.value("traceback", "")};
    }
    r.duration_ms = OptFrom<double>(j, "duration_ms");
    r.queued_ms = OptFrom<double>(j, "queued_ms");
    if (!j.at("usage").is_null()) {
      r.cpu_ms = OptFrom<double>(j.at("usage"), "cpu_ms");
      r.max_rss_kb = OptFrom<uint64_t>(j.at("usage"), "max_rss_kb");
    }
    r.worker = j.at("worker").is_null() ? "" : j.at("worker").get<std::string>();
    ASSIGN_OR_RETURN(r.files, FilesFromJson(j.at("files")));
    r.files_truncated = j.value("files_truncated", false);  // absent in older records
    r.files_omitted = j.value("files_omitted", 0u);
    if (auto o = j.find("outputs"); o != j.end()) {  // absent in older records
      ASSIGN_OR_RETURN(r.outputs, OutputsFromJson(*o));
    }
    r.outputs_truncated = j.value("outputs_truncated", false);
    r.session_epoch = OptFrom<uint64_t>(j, "session_epoch");
    r.queue_position = OptFrom<uint64_t>(j, "queue_position");
    if (auto w = j.find("wait_reason"); w != j.end() && w->is_string()) {
      r.wait_reason = w->get<std::string>();
    }
    r.redactions = j.at("redactions").get<uint32_t>();
    if (auto n = j.find("network"); n != j.end() && n->is_object()) {
      ASSIGN_OR_RETURN(r.network, common::NetworkUsage::FromJson(n->dump()));
    }
    r.warnings = j.at("warnings").get<std::vector<std::string>>();
    r.end_reason = j.at("end_reason").is_null() ? "" : j.at("end_reason").get<std::string>();
    r.created_ms = j.at("created_at_ms").get<int64_t>();
    r.started_ms = j.at("started_at_ms").is_null() ? 0 : j.at("started_at_ms").get<int64_t>();
    r.finished_ms = j.at("finished_at_ms").is_null() ? 0 : j.at("finished_at_ms").get<int64_t>();
    return r;
  } catch (const json::exception& e) {
    return common::Internal(std::string("stored job record is damaged: ") + e.what());
  }
}

json ErrorJson(const common::Status& status) {
  return {{"error",
           {{"code", common::CodeName(status.code())},
            {"message", status.message()},
            {"retryable", common::IsRetryable(status.code())}}}};
}

}  // namespace kiln::broker
