#include "cli/mcp/tool_calls.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include "cli/api_client.hpp"
#include "cli/run_request.hpp"
#include "common/base64.hpp"

namespace kiln::cli::mcp {
namespace {

using common::Status;
using nlohmann::json;

ToolOutcome InvalidArguments(const std::string& tool, const std::string& why) {
  return {RpcError{kInvalidParams, "Invalid params: " + tool + ": " + why, nullptr}, nullptr};
}

// A CallToolResult: the structured content and the same JSON as text, then
// any `extra` content blocks (execute_code's images).
ToolOutcome Result(json content, bool is_error, json extra = json::array()) {
  std::string text = content.dump(-1, ' ', false, json::error_handler_t::replace);
  json blocks = json::array({{{"type", "text"}, {"text", std::move(text)}}});
  for (auto& b : extra) blocks.push_back(std::move(b));
  return {std::nullopt,
          {{"content", std::move(blocks)},
           {"structuredContent", std::move(content)},
           {"isError", is_error}}};
}

// The first problem with `args` against a flat schema: the allowed keys,
// which are required, and a check per key. Empty when fine.
struct Field {
  const char* name;
  bool required;
  enum class Type { kString, kId, kPositiveInteger, kStringList, kBool, kObject, kFileList } type;
};

bool IsPositiveInteger(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>() > 0;
  if (v.is_number_integer()) return v.get<int64_t>() > 0;
  if (v.is_number_float()) {
    double d = v.get<double>();
    return d >= 1 && d <= 1e15 && std::floor(d) == d;
  }
  return false;
}

// execute_code's `files`: objects with a string `path` and exactly one of
// `content` (text) and `contentBase64`. Paths are the broker's to judge.
std::string CheckFiles(const json& files) {
  if (!files.is_array()) return "\"files\" must be an array";
  for (size_t i = 0; i < files.size(); ++i) {
    const json& f = files[i];
    const std::string at = "\"files[" + std::to_string(i) + "]";
    if (!f.is_object()) return at + "\" must be an object";
    for (const auto& [key, value] : f.items()) {
      if (key != "path" && key != "content" && key != "contentBase64") {
        return at + "\" has an unknown property \"" + key + "\"";
      }
      if (!value.is_string()) return at + "." + key + "\" must be a string";
    }
    if (!f.contains("path")) return at + "\" needs a path";
    if (f.contains("content") == f.contains("contentBase64")) {
      return at + "\" needs either content or contentBase64";
    }
  }
  return "";
}

std::string CheckArguments(const json& args, std::initializer_list<Field> fields) {
  std::set<std::string> known;
  for (const auto& f : fields) {
    known.insert(f.name);
    auto it = args.find(f.name);
    if (it == args.end() || it->is_null()) {
      if (f.required) return std::string("missing required argument \"") + f.name + "\"";
      continue;
    }
    switch (f.type) {
      case Field::Type::kString:
        if (!it->is_string()) return std::string("\"") + f.name + "\" must be a string";
        break;
      case Field::Type::kId:
        if (!it->is_string() || !IsSessionId(it->get<std::string>())) {
          return std::string("\"") + f.name + "\" must be 1-128 of A-Z a-z 0-9 . _ : -";
        }
        break;
      case Field::Type::kPositiveInteger:
        if (!IsPositiveInteger(*it))
          return std::string("\"") + f.name + "\" must be a positive integer";
        break;
      case Field::Type::kBool:
        if (!it->is_boolean()) return std::string("\"") + f.name + "\" must be true or false";
        break;
      case Field::Type::kObject:
        if (!it->is_object()) return std::string("\"") + f.name + "\" must be an object";
        break;
      case Field::Type::kFileList:
        if (std::string why = CheckFiles(*it); !why.empty()) return why;
        break;
      case Field::Type::kStringList:
        if (!it->is_array() ||
            !std::all_of(it->begin(), it->end(), [](const json& e) { return e.is_string(); })) {
          return std::string("\"") + f.name + "\" must be an array of strings";
        }
        break;
    }
  }
  for (const auto& [key, value] : args.items()) {
    if (!known.contains(key)) return "unknown argument \"" + key + "\"";
  }
  return "";
}

// Field accessors that never throw: a missing field or one of another type
// gives the fallback (records come from the broker, arguments from the client).
std::string StringOr(const json& object, const char* key, const char* fallback = "") {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : fallback;
}

bool BoolOr(const json& object, const char* key, bool fallback) {
  auto it = object.find(key);
  return it != object.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

json StringOrNull(const json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? *it : json(nullptr);
}

json IntegerOrNull(const json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_number_integer() ? *it : json(nullptr);
}

// Whether `s` is valid UTF-8 without NUL bytes: text an agent can read.
bool IsText(const std::string& s) {
  if (s.find('\0') != std::string::npos) return false;
  try {
    (void)json(s).dump();  // the strict handler throws on invalid UTF-8
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

// The MIME type of an image file an MCP client can show, by extension; "" if none.
std::string ImageType(const std::string& path) {
  static const std::pair<const char*, const char*> kTypes[] = {{".png", "image/png"},
                                                               {".jpg", "image/jpeg"},
                                                               {".jpeg", "image/jpeg"},
                                                               {".gif", "image/gif"},
                                                               {".webp", "image/webp"}};
  for (const auto& [ext, type] : kTypes) {
    const std::string e = ext;
    if (path.size() > e.size() && path.compare(path.size() - e.size(), e.size(), e) == 0) {
      return type;
    }
  }
  return "";
}

// The record's collected files as execute_code returns them: text when it
// is text, else base64 (as the broker sent it). Malformed entries are skipped.
json FilesContent(const json& record) {
  json out = json::array();
  auto files = record.find("files");
  if (files == record.end() || !files->is_array()) return out;
  for (const auto& f : *files) {
    if (!f.is_object()) continue;
    const std::string path = StringOr(f, "path");
    const std::string b64 = StringOr(f, "content_base64");
    auto bytes = common::Base64Decode(b64);
    if (path.empty() || !bytes.ok()) continue;
    json entry = {{"path", path}, {"size", bytes->size()}};
    if (ImageType(path).empty() && IsText(*bytes)) {
      entry["text"] = std::move(*bytes);
    } else {
      entry["contentBase64"] = b64;
    }
    out.push_back(std::move(entry));
  }
  return out;
}

bool IsPending(const std::string& status) {
  return status == "queued" || status == "running" || status == "awaiting_approval";
}

}  // namespace

json ErrorObject(const Status& status) {
  return {{"code", std::string(common::CodeName(status.code()))},
          {"message", status.message()},
          {"retryable", common::IsRetryable(status.code())}};
}

json ExecutionContent(const json& record) {
  const std::string status = StringOr(record, "status");
  json error = nullptr;
  if (auto it = record.find("error"); it != record.end() && it->is_object()) {
    error = {{"code", StringOr(*it, "code")},
             {"message", StringOr(*it, "message")},
             {"retryable", BoolOr(*it, "retryable", false)}};
    if (auto type = it->find("type"); type != it->end() && type->is_string()) {
      error["type"] = *type;
    }
    if (auto tb = it->find("traceback"); tb != it->end() && tb->is_string()) {
      error["traceback"] = *tb;
    }
  }
  auto duration = record.find("duration_ms");
  auto result = record.find("result");
  return {{"executionId", StringOrNull(record, "id")},
          {"status", status},
          {"stdout", StringOr(record, "stdout")},
          {"stderr", StringOr(record, "stderr")},
          {"exitCode", IntegerOrNull(record, "exit_code")},
          {"timedOut", status == "timed_out"},
          {"truncated", BoolOr(record, "truncated", false)},
          {"durationMs", duration != record.end() && duration->is_number() ? *duration : json()},
          {"result", result != record.end() ? *result : json()},
          {"sessionId", StringOrNull(record, "session_id")},
          {"sessionEpoch", IntegerOrNull(record, "session_epoch")},
          {"files", FilesContent(record)},
          {"filesTruncated", BoolOr(record, "files_truncated", false)},
          {"error", error}};
}

json ImageBlocks(const json& content) {
  json blocks = json::array();
  auto files = content.find("files");
  if (files == content.end() || !files->is_array()) return blocks;
  for (const auto& f : *files) {
    std::string type = ImageType(StringOr(f, "path"));
    auto data = f.find("contentBase64");
    if (type.empty() || data == f.end() || !data->is_string()) continue;
    blocks.push_back({{"type", "image"}, {"data", *data}, {"mimeType", type}});
  }
  return blocks;
}

json RefusedExecutionContent(const Status& status, const json& session_id) {
  return {{"executionId", nullptr},
          {"status", "request_failed"},
          {"stdout", ""},
          {"stderr", ""},
          {"exitCode", nullptr},
          {"timedOut", false},
          {"truncated", false},
          {"durationMs", nullptr},
          {"result", nullptr},
          {"sessionId", session_id.is_string() ? session_id : json(nullptr)},
          {"sessionEpoch", nullptr},
          {"files", json::array()},
          {"filesTruncated", false},
          {"error", ErrorObject(status)}};
}

json SessionContent(const json& s) {
  return {{"sessionId", StringOr(s, "id")},
          {"runtime", StringOr(s, "language")},
          {"state", StringOr(s, "state")},
          {"worker", StringOrNull(s, "worker")},
          {"createdAt", IntegerOrNull(s, "created_at")},
          {"lastUsedAt", IntegerOrNull(s, "last_used_at")},
          {"executionCount", IntegerOrNull(s, "execution_count")},
          {"epoch", IntegerOrNull(s, "epoch")},
          {"conversationId", StringOrNull(s, "conversation_id")}};
}

ToolOutcome ToolCalls::Call(const std::string& name, const json& arguments,
                            CancelTicket* ticket) const {
  if (!catalog_->Offers(name)) {
    std::string why = "Unknown tool: " + name;
    if (name == kExecuteCode) why += " (code execution is disabled for this tenant)";
    return {RpcError{kInvalidParams, why, nullptr}, nullptr};
  }
  if (!arguments.is_object()) return InvalidArguments(name, "\"arguments\" must be an object");
  if (name == kExecuteCode) return ExecuteCode(arguments, ticket);
  if (name == kListSessions) return ListSessions(arguments);
  return KillSession(arguments);
}

ToolOutcome ToolCalls::ExecuteCode(const json& args, CancelTicket* ticket) const {
  using T = Field::Type;
  std::string why = CheckArguments(args, {{"runtime", true, T::kString},
                                          {"code", true, T::kString},
                                          {"sessionId", false, T::kId},
                                          {"conversationId", false, T::kId},
                                          {"timeoutMs", false, T::kPositiveInteger},
                                          {"packages", false, T::kStringList},
                                          {"network", false, T::kBool},
                                          {"input", false, T::kObject},
                                          {"files", false, T::kFileList},
                                          {"collect", false, T::kStringList}});
  if (!why.empty()) return InvalidArguments(kExecuteCode, why);
  const std::string runtime = args["runtime"];
  const auto& runtimes = catalog_->offer().runtimes;
  if (std::find(runtimes.begin(), runtimes.end(), runtime) == runtimes.end()) {
    std::string list;
    for (const auto& r : runtimes) list += (list.empty() ? "" : ", ") + r;
    return InvalidArguments(kExecuteCode, "\"runtime\" must be one of " + list);
  }
  RunRequest request;
  request.language = runtime;
  request.code = args["code"];
  const json session = args.value("sessionId", json());
  if (session.is_string()) request.session_id = session;
  if (auto c = args.value("conversationId", json()); c.is_string()) request.conversation_id = c;
  if (auto t = args.value("timeoutMs", json()); t.is_number()) {
    request.timeout_ms = static_cast<uint64_t>(t.get<double>());
  }
  // Checked by the broker (common/package_spec.hpp), whose error comes back.
  if (auto p = args.value("packages", json()); p.is_array()) {
    request.packages = p.get<std::vector<std::string>>();
  }
  // Keys, paths and patterns are the broker's to judge; its error comes back.
  if (auto i = args.value("input", json()); i.is_object()) request.input = std::move(i);
  if (auto c = args.value("collect", json()); c.is_array()) {
    request.collect = c.get<std::vector<std::string>>();
  }
  if (auto files = args.find("files"); files != args.end() && files->is_array()) {
    for (size_t i = 0; i < files->size(); ++i) {
      const json& f = (*files)[i];
      RunRequest::File file{f["path"], ""};
      if (auto text = f.find("content"); text != f.end()) {
        file.content = *text;
      } else {
        auto bytes = common::Base64Decode(f["contentBase64"].get_ref<const std::string&>());
        if (!bytes.ok()) {
          return InvalidArguments(kExecuteCode, "\"files[" + std::to_string(i) +
                                                    "].contentBase64\" is not valid base64");
        }
        file.content = std::move(*bytes);
      }
      request.files.push_back(std::move(file));
    }
  }
  // Offered only with an allowlist; the broker answers NETWORK_NOT_ALLOWED
  // to a client that sends it anyway.
  if (auto n = args.value("network", json()); n.is_boolean()) request.network = n.get<bool>();
  // Its own Idempotency-Key: a cancellation finds the job through it, and
  // the broker never runs the call twice.
  json body = BuildSubmitBody(request);
  const std::string key = CallCancels::NewKey();
  if (ticket != nullptr && !ticket->Arm(body, key)) {
    return Result(
        RefusedExecutionContent(
            common::Status(common::Code::kCancelled, "the client cancelled the call"), session),
        true);
  }
  auto record =
      backend_->Submit(body, WaitReadTimeout(request.timeout_ms, !request.packages.empty()), key);
  if (!record.ok()) return Result(RefusedExecutionContent(record.status(), session), true);
  json content = ExecutionContent(*record);
  const std::string status = content["status"];
  const bool is_error = status == "rejected" || status == "error" || IsPending(status);
  json images = ImageBlocks(content);
  return Result(std::move(content), is_error, std::move(images));
}

ToolOutcome ToolCalls::ListSessions(const json& args) const {
  std::string why = CheckArguments(args, {{"conversationId", false, Field::Type::kId}});
  if (!why.empty()) return InvalidArguments(kListSessions, why);
  auto body = backend_->ListSessions(StringOr(args, "conversationId"));
  if (!body.ok()) {
    return Result({{"sessions", json::array()}, {"error", ErrorObject(body.status())}}, true);
  }
  json sessions = json::array();
  if (auto it = body->find("sessions"); it != body->end() && it->is_array()) {
    for (const auto& s : *it) {
      if (s.is_object()) sessions.push_back(SessionContent(s));
    }
  }
  return Result({{"sessions", std::move(sessions)}, {"error", nullptr}}, false);
}

ToolOutcome ToolCalls::KillSession(const json& args) const {
  std::string why = CheckArguments(args, {{"sessionId", true, Field::Type::kId}});
  if (!why.empty()) return InvalidArguments(kKillSession, why);
  const std::string id = args["sessionId"];
  auto body = backend_->DeleteSession(id);
  if (!body.ok()) {
    return Result({{"sessionId", id},
                   {"deleted", false},
                   {"state", nullptr},
                   {"error", ErrorObject(body.status())}},
                  true);
  }
  return Result({{"sessionId", id},
                 {"deleted", true},
                 {"state", StringOrNull(*body, "state")},
                 {"error", nullptr}},
                false);
}

}  // namespace kiln::cli::mcp
