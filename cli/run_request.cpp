#include "cli/run_request.hpp"

#include <algorithm>
#include <set>

#include "common/base64.hpp"
#include "common/identifier.hpp"
#include "common/json/bounded_json.hpp"
#include "common/protocol/messages.hpp"

namespace kiln::cli {
namespace {

using common::InvalidRequest;
using common::Status;
using common::StatusOr;
using nlohmann::json;

constexpr std::chrono::seconds kWaitMargin{30};
constexpr std::chrono::seconds kWaitUnknownTimeout{330};

// Splits "k=v" at the first '='.
StatusOr<std::pair<std::string, std::string>> SplitPair(const std::string& pair,
                                                        const std::string& flag) {
  auto eq = pair.find('=');
  if (eq == std::string::npos || eq == 0) {
    return InvalidRequest(flag + " '" + pair + "': expected KEY=VALUE");
  }
  return std::make_pair(pair.substr(0, eq), pair.substr(eq + 1));
}

}  // namespace

StatusOr<std::string> NormalizeLanguage(const std::string& lang) {
  static const std::map<std::string, std::string> kNames = {
      {"python", "python"}, {"py", "python"},       {"javascript", "javascript"},
      {"js", "javascript"}, {"node", "javascript"}, {"shell", "shell"},
      {"sh", "shell"},      {"bash", "shell"}};
  auto it = kNames.find(lang);
  if (it == kNames.end()) {
    return InvalidRequest("--lang '" + lang + "': expected python, javascript or shell");
  }
  return it->second;
}

std::optional<std::string> LanguageFromPath(const std::string& path) {
  auto slash = path.rfind('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  auto dot = name.rfind('.');
  if (dot == std::string::npos || dot == 0) return std::nullopt;
  std::string ext = name.substr(dot + 1);
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (ext == "py") return "python";
  if (ext == "js" || ext == "mjs" || ext == "cjs") return "javascript";
  if (ext == "sh" || ext == "bash") return "shell";
  return std::nullopt;
}

StatusOr<json> ParseInputs(const std::vector<std::string>& pairs,
                           const std::optional<std::string>& input_json) {
  json input = json::object();
  if (input_json) {
    ASSIGN_OR_RETURN(input, common::ParseJson(*input_json, {}, "--input-json"));
    if (!input.is_object()) return InvalidRequest("--input-json: expected a JSON object");
  }
  for (const auto& pair : pairs) {
    ASSIGN_OR_RETURN(auto kv, SplitPair(pair, "--input"));
    if (input.contains(kv.first)) {
      return InvalidRequest("--input: key '" + kv.first + "' given twice");
    }
    auto value = common::ParseJson(kv.second);
    input[kv.first] = value.ok() ? std::move(*value) : json(kv.second);
  }
  return input;
}

StatusOr<std::map<std::string, std::string>> ParseEnv(const std::vector<std::string>& pairs) {
  std::map<std::string, std::string> env;
  for (const auto& pair : pairs) {
    ASSIGN_OR_RETURN(auto kv, SplitPair(pair, "--env"));
    if (!common::IsIdentifier(kv.first)) {
      return InvalidRequest("--env '" + pair + "': '" + kv.first + "' is not a variable name");
    }
    if (!env.emplace(kv.first, kv.second).second) {
      return InvalidRequest("--env: variable '" + kv.first + "' given twice");
    }
  }
  return env;
}

StatusOr<FileSpec> ParseFileSpec(const std::string& spec) {
  FileSpec f;
  auto colon = spec.rfind(':');
  if (colon == std::string::npos) {
    f.local_path = spec;
  } else {
    f.local_path = spec.substr(0, colon);
    f.dest = spec.substr(colon + 1);
    if (f.dest.empty()) return InvalidRequest("--file '" + spec + "': empty DEST after ':'");
  }
  while (f.local_path.size() > 1 && f.local_path.back() == '/') f.local_path.pop_back();
  if (f.local_path.empty()) return InvalidRequest("--file '" + spec + "': empty PATH");
  if (f.dest.empty()) {
    auto slash = f.local_path.rfind('/');
    f.dest = slash == std::string::npos ? f.local_path : f.local_path.substr(slash + 1);
  }
  if (auto st = CheckRelativePath(f.dest); !st.ok()) {
    return InvalidRequest("--file '" + spec + "': DEST " + st.message());
  }
  return f;
}

json BuildSubmitBody(const RunRequest& request) {
  json body = {{"language", request.language}, {"code", request.code}};
  if (!request.session_id.empty()) body["session_id"] = request.session_id;
  if (!request.conversation_id.empty()) body["conversation_id"] = request.conversation_id;
  if (!request.input.empty()) body["input"] = request.input;
  if (!request.files.empty()) {
    json files = json::array();
    for (const auto& f : request.files) {
      files.push_back({{"path", f.dest}, {"content_base64", common::Base64Encode(f.content)}});
    }
    body["files"] = std::move(files);
  }
  if (!request.collect.empty()) body["collect"] = request.collect;
  if (!request.env.empty()) body["env"] = request.env;
  if (!request.packages.empty()) body["packages"] = request.packages;
  if (!request.network_allow.empty()) {
    body["network"] = request.network_allow;
  } else if (request.network) {
    body["network"] = true;
  }
  json limits = json::object();
  if (request.timeout_ms) limits["timeout_ms"] = *request.timeout_ms;
  if (request.memory_mb) limits["memory_mb"] = *request.memory_mb;
  if (request.cpu_ms) limits["cpu_ms"] = *request.cpu_ms;
  if (request.max_output_bytes) limits["max_output_bytes"] = *request.max_output_bytes;
  if (request.max_pids) limits["max_pids"] = *request.max_pids;
  if (!limits.empty()) body["limits"] = std::move(limits);
  body["wait"] = request.wait;
  return body;
}

std::chrono::seconds WaitReadTimeout(std::optional<uint64_t> timeout_ms, bool packages) {
  const std::chrono::seconds install(packages ? common::protocol::kMaxPackageInstallMs / 1000 : 0);
  if (!timeout_ms) return kWaitUnknownTimeout + install;
  // Round up; cap far beyond any sane limit so the arithmetic cannot overflow.
  uint64_t seconds = *timeout_ms / 1000 + (*timeout_ms % 1000 != 0 ? 1 : 0);
  seconds = std::min<uint64_t>(seconds, 7 * 24 * 3600);
  return std::chrono::seconds(seconds) + kWaitMargin + install;
}

}  // namespace kiln::cli
