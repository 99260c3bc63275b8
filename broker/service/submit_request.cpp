#include "broker/service/submit_request.hpp"

#include <map>
#include <set>

#include "broker/webhook/callback_url.hpp"
#include "common/base64.hpp"
#include "common/clock.hpp"
#include "common/identifier.hpp"
#include "common/json/bounded_json.hpp"
#include "common/network_policy.hpp"
#include "common/package_spec.hpp"
#include "common/relative_path.hpp"
#include "common/runtime_names.hpp"

namespace kiln::broker {
namespace {

using common::Code;
using common::InvalidRequest;
using common::IsIdentifier;
using common::Status;
using nlohmann::json;

const std::set<std::string> kLanguages = {"python", "javascript", "shell"};
const std::set<std::string> kFields = {
    "language",     "code",   "session_id",     "conversation_id", "input", "files",    "collect",
    "env",          "limits", "wait",           "priority",        "stdin", "packages", "network",
    "callback_url", "tools",  "tool_timeout_ms"};

const std::set<std::string> kLimitFields = {"timeout_ms", "memory_mb", "cpu_ms", "max_output_bytes",
                                            "max_pids"};

Status ReadLimit(const json& limits, const char* key, uint64_t max, uint64_t* out) {
  auto it = limits.find(key);
  if (it == limits.end() || it->is_null()) return Status::Ok();
  if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<int64_t>() > 0)) {
    return InvalidRequest(std::string("limits.") + key + ": expected a positive integer");
  }
  uint64_t v = it->get<uint64_t>();
  if (v == 0) return InvalidRequest(std::string("limits.") + key + ": must be positive");
  if (v > max) {
    return Status(Code::kLimitExceeded, std::string("limits.") + key + " is " + std::to_string(v) +
                                            ", above the maximum " + std::to_string(max));
  }
  *out = v;
  return Status::Ok();
}

// Files `a` and `a/b` cannot both be written: `a` would have to be a file
// and a directory. Names the deeper path's field.
Status CheckNoFileIsADirectory(const std::vector<common::protocol::FileEntry>& files) {
  std::map<std::string_view, size_t> index;
  for (size_t i = 0; i < files.size(); ++i) index.emplace(files[i].path, i);
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string& path = files[i].path;
    for (size_t slash = path.find('/'); slash != std::string::npos;
         slash = path.find('/', slash + 1)) {
      auto it = index.find(std::string_view(path).substr(0, slash));
      if (it == index.end()) continue;
      return InvalidRequest("files[" + std::to_string(i) + "].path: '" + path.substr(0, 200) +
                            "' needs '" + path.substr(0, std::min<size_t>(slash, 200)) +
                            "' to be a directory, but files[" + std::to_string(it->second) +
                            "] is a file of that name");
    }
  }
  return Status::Ok();
}

// What a language's runtime refuses (worker/runtimes/runtime.cpp), refused
// here first so the client gets a 400 instead of a job that ends `error`.
Status CheckForRuntime(const JobSpec& spec, const json* input) {
  if (spec.language == "shell") {
    // The shell wrapper takes the code as text: bash cannot hold a NUL byte.
    if (spec.code.find('\0') != std::string::npos) {
      return InvalidRequest("code: shell code cannot contain NUL bytes");
    }
    for (const auto& [name, value] : spec.env) {
      if (common::IsBashReadonlyName(name)) {
        return InvalidRequest("env." + name + ": a read-only variable in bash");
      }
      if (common::IsShellReservedName(name)) {
        return InvalidRequest("env." + name + ": names starting with __kiln are reserved in shell");
      }
    }
    if (input == nullptr) return Status::Ok();
    for (const auto& [key, value] : input->items()) {
      const std::string field = "input." + key;
      if (common::IsBashReadonlyName(key)) {
        return InvalidRequest(field + ": a read-only variable in bash");
      }
      if (common::IsShellReservedName(key)) {
        return InvalidRequest(field + ": names starting with __kiln are reserved in shell");
      }
      if (spec.env.count(key) != 0) {
        return InvalidRequest(field + ": also in env (in shell both are environment variables)");
      }
      // Strings become the variable as they are; other values their JSON text.
      if (value.is_string() &&
          value.get_ref<const std::string&>().find('\0') != std::string::npos) {
        return InvalidRequest(field + ": a shell variable cannot hold a NUL byte");
      }
    }
  } else if (spec.language == "javascript" && input != nullptr) {
    for (const auto& [key, value] : input->items()) {
      if (common::IsJavaScriptReadonlyGlobal(key)) {
        return InvalidRequest("input." + key + ": a read-only global in javascript");
      }
    }
  }
  return Status::Ok();
}

// The job travels to its worker as one protocol frame: whatever
// ParseSubmitRequest accepts (each field at most its protocol limit, which
// the config maxima cannot exceed) fits, with room for ids, limits and the
// tenant's secrets (64 x 4 KiB), so no accepted job is undeliverable.
namespace protocol = common::protocol;
static_assert(protocol::kMaxCodeBytes + protocol::kMaxInputJsonBytes + protocol::kMaxFilesBytes +
                      protocol::kMaxStdinBytes +
                      protocol::kMaxFiles * (common::kMaxRelativePathBytes + 16) +
                      protocol::kMaxEnvEntries *
                          (common::kMaxIdentifierBytes + protocol::kMaxStringBytes + 16) +
                      protocol::kMaxListEntries * (common::kMaxRelativePathBytes + 16) +
                      (1u << 20) <
                  protocol::kMaxMessageBytes,
              "an accepted job must fit in one protocol frame");

}  // namespace

bool IsSessionName(const std::string& s) {
  bool ok = !s.empty() && s.size() <= 128;
  for (char c : s) {
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
                c == ':');
  }
  return ok;
}

common::StatusOr<JobSpec> ParseSubmitRequest(std::string_view body, const std::string& tenant,
                                             const BrokerConfig& config) {
  ASSIGN_OR_RETURN(json j, common::ParseJson(body, {}, "request body"));
  if (!j.is_object()) return InvalidRequest("request body must be a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (kFields.count(key) == 0) return InvalidRequest("unknown field '" + key + "'");
  }

  JobSpec spec;
  spec.tenant = tenant;
  spec.limits = config.default_limits;

  auto lang = j.find("language");
  if (lang == j.end() || !lang->is_string()) {
    return InvalidRequest("language: required, one of python, javascript, shell");
  }
  spec.language = lang->get<std::string>();
  if (kLanguages.count(spec.language) == 0) {
    return InvalidRequest("language: unknown language '" + spec.language +
                          "' (expected python, javascript or shell)");
  }

  auto code = j.find("code");
  if (code == j.end() || !code->is_string()) return InvalidRequest("code: required string");
  spec.code = code->get<std::string>();
  if (spec.code.size() > config.max_code_bytes) {
    return Status(Code::kLimitExceeded, "code is " + std::to_string(spec.code.size()) +
                                            " bytes, above the maximum " +
                                            std::to_string(config.max_code_bytes));
  }

  if (auto s = j.find("session_id"); s != j.end() && !s->is_null()) {
    if (!s->is_string()) return InvalidRequest("session_id: expected a string");
    spec.session_id = s->get<std::string>();
    if (!IsSessionName(spec.session_id)) {
      return InvalidRequest("session_id: 1-128 characters of [A-Za-z0-9._:-]");
    }
  }
  if (auto c = j.find("conversation_id"); c != j.end() && !c->is_null()) {
    if (!c->is_string()) return InvalidRequest("conversation_id: expected a string");
    spec.conversation_id = c->get<std::string>();
    if (!IsSessionName(spec.conversation_id)) {
      return InvalidRequest("conversation_id: 1-128 characters of [A-Za-z0-9._:-]");
    }
    if (spec.session_id.empty()) {
      return InvalidRequest("conversation_id: only meaningful with a session_id");
    }
  }
  if (auto p = j.find("priority"); p != j.end() && !p->is_null()) {
    if (!p->is_number_integer() || p->get<int64_t>() < 0 || p->get<int64_t>() > 9) {
      return InvalidRequest("priority: an integer from 0 (default) to 9 (first)");
    }
    spec.priority = static_cast<uint32_t>(p->get<int64_t>());
  }

  const json* input = nullptr;
  if (auto in = j.find("input"); in != j.end() && !in->is_null()) {
    if (!in->is_object()) return InvalidRequest("input: expected a JSON object");
    for (const auto& [key, value] : in->items()) {
      if (!IsIdentifier(key)) {
        return InvalidRequest("input: key '" + key + "' is not a valid identifier");
      }
    }
    input = &*in;
    spec.input_json = common::DumpJson(*in);
    if (spec.input_json.size() > config.max_input_bytes) {
      return Status(Code::kLimitExceeded, "input is " + std::to_string(spec.input_json.size()) +
                                              " bytes, above the maximum " +
                                              std::to_string(config.max_input_bytes));
    }
  }

  if (auto env = j.find("env"); env != j.end() && !env->is_null()) {
    if (!env->is_object()) return InvalidRequest("env: expected an object of strings");
    if (env->size() > common::protocol::kMaxEnvEntries) {
      return Status(Code::kLimitExceeded, "env: too many variables");
    }
    for (const auto& [key, value] : env->items()) {
      if (!IsIdentifier(key)) return InvalidRequest("env: '" + key + "' is not a valid name");
      if (!value.is_string()) return InvalidRequest("env." + key + ": expected a string");
      std::string v = value.get<std::string>();
      if (v.find('\0') != std::string::npos || v.size() > common::protocol::kMaxStringBytes) {
        return InvalidRequest("env." + key + ": value has a NUL byte or is too long");
      }
      spec.env[key] = std::move(v);
    }
  }

  if (auto in = j.find("stdin"); in != j.end() && !in->is_null()) {
    if (!in->is_string()) return InvalidRequest("stdin: expected a string");
    spec.stdin_data = in->get<std::string>();
    if (spec.stdin_data.size() > protocol::kMaxStdinBytes) {
      return InvalidRequest("stdin: " + std::to_string(spec.stdin_data.size()) +
                            " bytes, above the maximum of " +
                            std::to_string(protocol::kMaxStdinBytes) + " bytes (1 MiB)");
    }
    // The shell wrapper holds stdin in a bash string until it is on fd 0.
    if (spec.language == "shell" && spec.stdin_data.find('\0') != std::string::npos) {
      return InvalidRequest("stdin: shell jobs cannot read a NUL byte from stdin");
    }
  }

  if (auto p = j.find("packages"); p != j.end() && !p->is_null()) {
    if (!p->is_array()) return InvalidRequest("packages: expected an array of strings");
    if (p->size() > protocol::kMaxRequestPackages) {
      return Status(Code::kLimitExceeded, "packages: " + std::to_string(p->size()) +
                                              " packages, above the maximum " +
                                              std::to_string(protocol::kMaxRequestPackages));
    }
    for (size_t i = 0; i < p->size(); ++i) {
      if (!(*p)[i].is_string()) {
        return InvalidRequest("packages[" + std::to_string(i) + "]: expected a string");
      }
      spec.packages.push_back((*p)[i].get<std::string>());
    }
    RETURN_IF_ERROR(common::ValidatePackageSpecs(spec.language, spec.packages));
  }

  if (auto c = j.find("callback_url"); c != j.end() && !c->is_null()) {
    if (!c->is_string()) return InvalidRequest("callback_url: expected a string");
    RETURN_IF_ERROR(ParseCallbackUrl(c->get_ref<const std::string&>()).status());
    spec.callback_url = c->get<std::string>();
  }
  if (auto t = j.find("tools"); t != j.end() && !t->is_null()) {
    ASSIGN_OR_RETURN(spec.tools, ParseToolDecls(*t));
  }
  if (auto t = j.find("tool_timeout_ms"); t != j.end() && !t->is_null()) {
    if (!t->is_number_integer() || t->get<int64_t>() < 1) {
      return InvalidRequest("tool_timeout_ms: expected a positive integer");
    }
    if (t->get<uint64_t>() > kMaxToolTimeoutMs) {
      return Status(Code::kLimitExceeded,
                    "tool_timeout_ms: above the maximum of " + std::to_string(kMaxToolTimeoutMs));
    }
    if (spec.tools.empty()) return InvalidRequest("tool_timeout_ms: only with tools");
    spec.tool_timeout_ms = t->get<uint64_t>();
  }
  if (auto n = j.find("network"); n != j.end() && !n->is_null()) {
    if (n->is_boolean()) {
      spec.network = n->get<bool>();
    } else if (n->is_array()) {
      if (n->size() > protocol::kMaxNetworkDestinations) {
        return Status(Code::kLimitExceeded, "network: " + std::to_string(n->size()) +
                                                " destinations, above the maximum of " +
                                                std::to_string(protocol::kMaxNetworkDestinations));
      }
      std::vector<std::string> texts;
      for (size_t i = 0; i < n->size(); ++i) {
        if (!(*n)[i].is_string()) {
          return InvalidRequest("network[" + std::to_string(i) + "]: expected a string");
        }
        texts.push_back((*n)[i].get<std::string>());
      }
      ASSIGN_OR_RETURN(auto list, common::ParseDestinations(texts, "network"));
      if (list.empty()) return InvalidRequest("network: an empty list (write false for none)");
      spec.network = true;
      for (const auto& d : list) spec.network_allow.push_back(d.ToString());
    } else {
      return InvalidRequest("network: expected true, false or an array of host:port strings");
    }
  }

  if (auto files = j.find("files"); files != j.end() && !files->is_null()) {
    if (!files->is_array()) return InvalidRequest("files: expected an array");
    if (files->size() > common::protocol::kMaxFiles) {
      return Status(Code::kLimitExceeded, "files: too many files");
    }
    uint64_t total = 0;
    std::set<std::string> seen;
    for (size_t i = 0; i < files->size(); ++i) {
      const json& f = (*files)[i];
      std::string field = "files[" + std::to_string(i) + "]";
      if (!f.is_object()) return InvalidRequest(field + ": expected an object");
      for (const auto& [key, value] : f.items()) {
        if (key != "path" && key != "content_base64") {
          return InvalidRequest(field + ": unknown field '" + key + "'");
        }
      }
      if (!f.contains("path") || !f["path"].is_string()) {
        return InvalidRequest(field + ".path: required string");
      }
      if (!f.contains("content_base64") || !f["content_base64"].is_string()) {
        return InvalidRequest(field + ".content_base64: required string");
      }
      std::string path = f["path"].get<std::string>();
      RETURN_IF_ERROR(common::CheckRelativePath(path).WithContext(field + ".path"));
      if (!seen.insert(path).second) return InvalidRequest(field + ".path: duplicate path");
      auto content = common::Base64Decode(f["content_base64"].get<std::string>());
      if (!content.ok()) return content.status().WithContext(field + ".content_base64");
      total += content->size();
      if (total > config.max_files_bytes) {
        return Status(Code::kLimitExceeded, "files: total size above the maximum " +
                                                std::to_string(config.max_files_bytes) + " bytes");
      }
      spec.files.push_back({std::move(path), std::move(*content)});
    }
    RETURN_IF_ERROR(CheckNoFileIsADirectory(spec.files));
  }

  if (auto collect = j.find("collect"); collect != j.end() && !collect->is_null()) {
    if (!collect->is_array() || collect->size() > common::protocol::kMaxListEntries) {
      return InvalidRequest("collect: expected an array of at most 64 patterns");
    }
    for (size_t i = 0; i < collect->size(); ++i) {
      const json& p = (*collect)[i];
      const std::string field = "collect[" + std::to_string(i) + "]";
      if (!p.is_string()) return InvalidRequest(field + ": expected a string");
      std::string pat = p.get<std::string>();
      RETURN_IF_ERROR(common::CheckRelativePath(pat).WithContext(field));
      spec.collect.push_back(std::move(pat));
    }
  }

  if (auto limits = j.find("limits"); limits != j.end() && !limits->is_null()) {
    if (!limits->is_object()) return InvalidRequest("limits: expected an object");
    for (const auto& [key, value] : limits->items()) {
      if (kLimitFields.count(key) == 0)
        return InvalidRequest("limits: unknown field '" + key + "'");
    }
    const auto& m = config.max_limits;
    RETURN_IF_ERROR(ReadLimit(*limits, "timeout_ms", m.timeout_ms, &spec.limits.timeout_ms));
    RETURN_IF_ERROR(ReadLimit(*limits, "memory_mb", m.memory_mb, &spec.limits.memory_mb));
    RETURN_IF_ERROR(ReadLimit(*limits, "cpu_ms", m.cpu_ms, &spec.limits.cpu_ms));
    RETURN_IF_ERROR(
        ReadLimit(*limits, "max_output_bytes", m.max_output_bytes, &spec.limits.max_output_bytes));
    RETURN_IF_ERROR(ReadLimit(*limits, "max_pids", m.max_pids, &spec.limits.max_pids));
    if (spec.limits.memory_mb < 16) return InvalidRequest("limits.memory_mb: at least 16");
  }

  if (auto wait = j.find("wait"); wait != j.end() && !wait->is_null()) {
    if (!wait->is_boolean()) return InvalidRequest("wait: expected true or false");
    spec.wait = wait->get<bool>();
  }

  RETURN_IF_ERROR(CheckForRuntime(spec, input));

  spec.id = common::NewId("ex_");
  spec.created_ms = common::NowMs();
  return spec;
}

}  // namespace kiln::broker
