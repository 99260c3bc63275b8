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
        {"error", ErrorSchema()}}},
      {"required",
       {"executionId", "status", "stdout", "stderr", "exitCode", "timedOut", "truncated",
        "durationMs", "result", "sessionId", "sessionEpoch", "error"}}};
  return {{"name", kExecuteCode},
          {"title", "Execute code"},
          {"description",
           "Runs code in an isolated sandbox of a Kiln cluster and returns its stdout, stderr, "
           "exit code and the JSON value of a variable named `result`. Pass a sessionId to keep "
           "variables between calls." +
               NetworkSentence(offer) + PackagesSentence(offer)},
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
