#include "cli/mcp/tool_catalog.hpp"

#include <algorithm>

namespace kiln::cli::mcp {
namespace {

using common::Code;
using common::StatusOr;
using nlohmann::json;

const std::vector<std::string> kKnownRuntimes = {"python", "javascript", "shell"};
constexpr char kIdPattern[] = "^[A-Za-z0-9._:-]{1,128}$";

json IdSchema(const std::string& description) {
  return {{"type", "string"}, {"pattern", kIdPattern}, {"description", description}};
}

json Nullable(const char* type) { return {{"type", json::array({type, "null"})}}; }

json ErrorSchema() {
  return {{"type", json::array({"object", "null"})},
          {"description", "Why the call or the execution failed; null when it did not"},
          {"properties",
           {{"code", {{"type", "string"}, {"description", "The Kiln API error code"}}},
            {"message", {{"type", "string"}}},
            {"retryable", {{"type", "boolean"}}}}}};
}

// "... Pre-installed: python: numpy, pandas; javascript: lodash (require or
// await import())." for the runtimes offered; "" when none has packages.
std::string PackagesSentence(const Offer& offer) {
  std::string out;
  for (const auto& runtime : offer.runtimes) {
    auto it = offer.packages.find(runtime);
    if (it == offer.packages.end() || it->second.empty()) continue;
    out += out.empty() ? " Pre-installed packages: " : "; ";
    out += runtime + ": ";
    for (size_t i = 0; i < it->second.size(); ++i) out += (i ? ", " : "") + it->second[i];
    if (runtime == "javascript") out += " (require or await import())";
  }
  return out.empty() ? out : out + ".";
}

// "Network: ..." when the tenant has an allowlist, else that there is none.
std::string NetworkSentence(const Offer& offer) {
  if (offer.network_allow.empty()) return " No network access unless the cluster allows it.";
  std::string list;
  for (const auto& d : offer.network_allow) list += (list.empty() ? "" : ", ") + d;
  return " No network access unless you pass network: true; then HTTP(S) to " + list +
         " only (through a proxy that clients such as python requests, curl and node fetch "
         "use by themselves).";
}

// "30 s", "1500 ms"; "10 min" for whole minutes of seconds.
std::string Millis(uint64_t ms) {
  return ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms";
}
std::string Seconds(uint64_t s) {
  return s % 60 == 0 ? std::to_string(s / 60) + " min" : std::to_string(s) + " s";
}
std::string Bytes(uint64_t b) {
  if (b % (1u << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b % (1u << 10) == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " bytes";
}

// " Limits per call: ..." and the sessions' idle time, for what the broker
// said; "" when it said nothing (a broker from before these fields).
std::string LimitsSentence(const Offer& offer) {
  const Offer::Limits& l = offer.limits;
  std::vector<std::string> parts;
  if (l.default_timeout_ms != 0) {
    std::string t = "timeoutMs " + Millis(l.default_timeout_ms) + " by default";
    if (l.max_timeout_ms != 0) t += ", at most " + Millis(l.max_timeout_ms);
    parts.push_back(t + " (wall clock)");
  }
  if (l.memory_mb != 0) parts.push_back("memory " + std::to_string(l.memory_mb) + " MiB");
  if (l.max_output_bytes != 0) {
    parts.push_back("stdout and stderr " + Bytes(l.max_output_bytes) +
                    " together, cut beyond (truncated: true)");
  }
  if (l.max_code_bytes != 0) parts.push_back("code " + Bytes(l.max_code_bytes));
  if (l.max_files_bytes != 0) parts.push_back("files " + Bytes(l.max_files_bytes) + " in all");
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "; " : " Limits per call: ") + parts[i];
  if (!out.empty()) out += ".";
  if (offer.session_ttl_s != 0) {
    out += " A session unused for " + Seconds(offer.session_ttl_s) +
           " ends, and its variables are lost.";
  }
  return out;
}

json FilesInSchema() {
  return {{"type", "array"},
          {"maxItems", 256},
          {"description", "Files written into the working directory before the code runs"},
          {"items",
           {{"type", "object"},
            {"properties",
             {{"path",
               {{"type", "string"},
                {"description", "Relative to the working directory, e.g. data/in.csv"}}},
              {"content", {{"type", "string"}, {"description", "The file's text (UTF-8)"}}},
              {"contentBase64",
               {{"type", "string"},
                {"description", "The file's bytes in base64, instead of content"}}}}},
            {"required", {"path"}},
            {"additionalProperties", false}}}};
}

json FilesOutSchema() {
  return {{"type", "array"},
          {"description",
           "The files `collect` matched, sorted by path: `text` when the file is UTF-8 text, "
           "else `contentBase64` (images come as image content too)"},
          {"items",
           {{"type", "object"},
            {"properties",
             {{"path", {{"type", "string"}}},
              {"size", {{"type", "integer"}}},
              {"text", {{"type", "string"}}},
              {"contentBase64", {{"type", "string"}}}}},
            {"required", {"path", "size"}}}}};
}

json ExecuteCodeTool(const Offer& offer) {
  const std::vector<std::string>& runtimes = offer.runtimes;
  json input = {
      {"type", "object"},
      {"properties",
       {{"runtime",
         {{"type", "string"}, {"enum", runtimes}, {"description", "The language of `code`"}}},
        {"code", {{"type", "string"}, {"description", "The program to run"}}},
        {"sessionId",
         IdSchema("Run in this session: its interpreter and variables persist between calls "
                  "with the same sessionId (created on first use). Omit for a fresh sandbox.")},
        {"conversationId",
         IdSchema("The conversation this call belongs to, so its sessions can be listed and "
                  "cleaned up together")},
        {"timeoutMs",
         {{"type", "integer"},
          {"minimum", 1},
          {"description", "Wall-clock limit in milliseconds (the cluster's default if omitted)"}}},
        {"input",
         {{"type", "object"},
          {"description",
           "Named values for the code: python and javascript see them as global variables, "
           "shell as environment variables (other values than strings as compact JSON). Keys "
           "are identifiers ([A-Za-z_][A-Za-z0-9_]*)."}}},
        {"files", FilesInSchema()},
        {"collect",
         {{"type", "array"},
          {"items", {{"type", "string"}}},
          {"maxItems", 64},
          {"description",
           "Glob patterns relative to the working directory, e.g. out/*.png: the files they "
           "match after the run come back in `files`"}}},
        {"packages",
         {{"type", "array"},
          {"items", {{"type", "string"}}},
          {"maxItems", 32},
          {"description",
           "Extra packages to install before the code runs, from the cluster's package "
           "index when its workers have one: python \"name\" or \"name==1.2.3\", javascript "
           "\"name\" or \"name@1.2.3\". In a session they add to what earlier calls "
           "installed."}}}}},
      {"required", {"runtime", "code"}},
      {"additionalProperties", false}};
  if (offer.limits.max_timeout_ms != 0) {
    input["properties"]["timeoutMs"]["maximum"] = offer.limits.max_timeout_ms;
  }
  if (!offer.network_allow.empty()) {
    input["properties"]["network"] = {
        {"type", "boolean"},
        {"description",
         "Let the code reach the network: only the destinations named in this tool's "
         "description, through the cluster's egress gateway"}};
  }
  json output = {
      {"type", "object"},
      {"properties",
       {{"executionId", Nullable("string")},
        {"status",
         {{"type", "string"},
          {"description",
           "succeeded, failed, timed_out, memory_exceeded, cancelled, rejected, error, a "
           "non-terminal status (queued, awaiting_approval, running), or request_failed when "
           "the cluster refused the request"}}},
        {"stdout", {{"type", "string"}}},
        {"stderr", {{"type", "string"}}},
        {"exitCode", Nullable("integer")},
        {"timedOut", {{"type", "boolean"}}},
        {"truncated", {{"type", "boolean"}}},
        {"durationMs", Nullable("number")},
        {"result", {{"description", "The JSON value of a variable named `result`, or null"}}},
        {"sessionId", Nullable("string")},
        {"sessionEpoch",
         {{"type", json::array({"integer", "null"})},
          {"description", "Changes when the session's interpreter was recreated (state lost)"}}},
        {"files", FilesOutSchema()},
        {"filesTruncated",
         {{"type", "boolean"},
          {"description",
           "A file `collect` matched is missing from `files` (too many, too large)"}}},
        {"error", ErrorSchema()}}},
      {"required",
       {"executionId", "status", "stdout", "stderr", "exitCode", "timedOut", "truncated",
        "durationMs", "result", "sessionId", "sessionEpoch", "files", "filesTruncated", "error"}}};
  return {{"name", kExecuteCode},
          {"title", "Execute code"},
          {"description",
           "Runs code in an isolated sandbox of a Kiln cluster and returns its stdout, stderr, "
           "exit code and the JSON value of a variable named `result`. Pass a sessionId to keep "
           "variables between calls; pass files in and collect the files it writes." +
               LimitsSentence(offer) + NetworkSentence(offer) + PackagesSentence(offer)},
          {"inputSchema", std::move(input)},
          {"outputSchema", std::move(output)},
          {"annotations",
           {{"readOnlyHint", false},
            {"destructiveHint", false},
            {"idempotentHint", false},
            {"openWorldHint", false}}}};
}

json SessionSchema() {
  return {
      {"type", "object"},
      {"properties",
       {{"sessionId", {{"type", "string"}}},
        {"runtime", {{"type", "string"}}},
        {"state", {{"type", "string"}}},
        {"worker", Nullable("string")},
        {"createdAt",
         {{"type", json::array({"integer", "null"})}, {"description", "ms since the Unix epoch"}}},
        {"lastUsedAt", Nullable("integer")},
        {"executionCount", Nullable("integer")},
        {"epoch", Nullable("integer")},
        {"conversationId", Nullable("string")}}},
      {"required", {"sessionId"}}};
}

json ListSessionsTool() {
  return {
      {"name", kListSessions},
      {"title", "List sessions"},
      {"description",
       "Lists your live code-execution sessions, or only those of one conversation."},
      {"inputSchema",
       {{"type", "object"},
        {"properties", {{"conversationId", IdSchema("Only the sessions of this conversation")}}},
        {"additionalProperties", false}}},
      {"outputSchema",
       {{"type", "object"},
        {"properties",
         {{"sessions", {{"type", "array"}, {"items", SessionSchema()}}}, {"error", ErrorSchema()}}},
        {"required", {"sessions"}}}},
      {"annotations",
       {{"readOnlyHint", true}, {"idempotentHint", true}, {"openWorldHint", false}}}};
}

json KillSessionTool() {
  return {{"name", kKillSession},
          {"title", "Kill session"},
          {"description", "Ends a session: its interpreter and all its state are discarded."},
          {"inputSchema",
           {{"type", "object"},
            {"properties", {{"sessionId", IdSchema("The session to end")}}},
            {"required", {"sessionId"}},
            {"additionalProperties", false}}},
          {"outputSchema",
           {{"type", "object"},
            {"properties",
             {{"sessionId", {{"type", "string"}}},
              {"deleted", {{"type", "boolean"}}},
              {"state", Nullable("string")},
              {"error", ErrorSchema()}}},
            {"required", {"sessionId", "deleted"}}}},
          {"annotations",
           {{"readOnlyHint", false},
            {"destructiveHint", true},
            {"idempotentHint", true},
            {"openWorldHint", false}}}};
}

// A positive integer at object[key], else 0.
uint64_t PositiveOrZero(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end()) return 0;
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  if (it->is_number_integer() && it->get<int64_t>() > 0) return it->get<int64_t>();
  return 0;
}

// capabilities' "limits" and "session_ttl_s" into `offer`.
void ReadLimits(const json& body, Offer* offer) {
  offer->session_ttl_s = PositiveOrZero(body, "session_ttl_s");
  auto limits = body.find("limits");
  if (limits == body.end() || !limits->is_object()) return;
  Offer::Limits& l = offer->limits;
  if (auto d = limits->find("default"); d != limits->end() && d->is_object()) {
    l.default_timeout_ms = PositiveOrZero(*d, "timeout_ms");
    l.memory_mb = PositiveOrZero(*d, "memory_mb");
    l.max_output_bytes = PositiveOrZero(*d, "max_output_bytes");
  }
  if (auto m = limits->find("max"); m != limits->end() && m->is_object()) {
    l.max_timeout_ms = PositiveOrZero(*m, "timeout_ms");
  }
  l.max_code_bytes = PositiveOrZero(*limits, "max_code_bytes");
  l.max_files_bytes = PositiveOrZero(*limits, "max_files_bytes");
}

}  // namespace

StatusOr<Offer> OfferFromCapabilities(const StatusOr<json>& answer) {
  Offer offer;
  if (!answer.ok()) {
    switch (answer.status().code()) {
      case Code::kUnauthorized:
      case Code::kForbidden:
        return answer.status().WithContext("GET /v1/capabilities");
      case Code::kNotFound:  // a broker from before /v1/capabilities
        return offer;
      case Code::kCodeExecutionDisabled:
        offer.code_execution = false;
        return offer;
      default:
        offer.note = "could not ask the broker whether code execution is enabled (" +
                     answer.status().ToString() + "); offering execute_code";
        return offer;
    }
  }
  const json& body = *answer;
  if (auto it = body.find("code_execution"); it != body.end() && it->is_boolean()) {
    offer.code_execution = it->get<bool>();
  }
  if (auto it = body.find("runtimes"); it != body.end() && it->is_array()) {
    std::vector<std::string> offered;
    for (const auto& r : kKnownRuntimes) {
      if (std::find(it->begin(), it->end(), json(r)) != it->end()) offered.push_back(r);
    }
    // An empty list (no worker up yet) does not narrow the offer.
    if (!offered.empty()) offer.runtimes = std::move(offered);
  }
  if (auto it = body.find("packages"); it != body.end() && it->is_object()) {
    for (const auto& r : kKnownRuntimes) {
      auto names = it->find(r);
      if (names == it->end() || !names->is_array()) continue;
      auto& list = offer.packages[r];
      for (const auto& n : *names) {
        if (list.size() == kMaxPackageNames) break;
        if (!n.is_string()) continue;
        const std::string& s = n.get_ref<const std::string&>();
        bool plain = !s.empty() && s.size() <= 128;
        for (char c : s) plain = plain && c > ' ' && c < 0x7f && c != ',' && c != ';';
        if (plain) list.push_back(s);
      }
    }
  }
  if (auto it = body.find("network"); it != body.end() && it->is_object()) {
    auto allow = it->find("allow");
    if (allow != it->end() && allow->is_array()) {
      for (const auto& d : *allow) {
        if (offer.network_allow.size() == 64 || !d.is_string()) continue;
        const std::string& s = d.get_ref<const std::string&>();
        bool plain = !s.empty() && s.size() <= 264;
        for (char c : s) plain = plain && c > ' ' && c < 0x7f && c != ',' && c != ';';
        if (plain) offer.network_allow.push_back(s);
      }
    }
  }
  ReadLimits(body, &offer);
  return offer;
}

ToolCatalog::ToolCatalog(Offer offer) : offer_(std::move(offer)), tools_(json::array()) {
  if (offer_.code_execution) tools_.push_back(ExecuteCodeTool(offer_));
  tools_.push_back(ListSessionsTool());
  tools_.push_back(KillSessionTool());
}

bool ToolCatalog::Offers(const std::string& name) const {
  for (const auto& t : tools_) {
    if (t["name"] == name) return true;
  }
  return false;
}

}  // namespace kiln::cli::mcp
