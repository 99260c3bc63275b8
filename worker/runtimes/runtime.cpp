#include "worker/runtimes/runtime.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <exception>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/base64.hpp"
#include "common/identifier.hpp"
#include "common/json/bounded_json.hpp"
#include "common/rich_output.hpp"
#include "common/runtime_names.hpp"
#include "worker/runtimes/wrappers.hpp"

namespace kiln::worker::runtimes {
namespace {

using common::Code;
using common::InvalidRequest;
using common::Status;
using common::StatusOr;
using common::protocol::ErrorInfo;
using nlohmann::json;

// Fixed environment of a warm sandbox; the job's env is applied by the wrapper.
const std::vector<std::string>& BaseEnv() {
  static const std::vector<std::string> env = {"PATH=/usr/local/bin:/usr/bin:/bin",
                                               "HOME=/workspace", "TMPDIR=/tmp", "LANG=C.UTF-8"};
  return env;
}

// Python's: matplotlib draws off-screen (Agg: plt.show() would otherwise look
// for a display) and keeps its font cache in /tmp, as does fontconfig (whose
// fc-list matplotlib runs), not in HOME (/workspace, whose files the job may
// collect).
std::vector<std::string> PythonEnv() {
  std::vector<std::string> env = BaseEnv();
  env.emplace_back("MPLBACKEND=Agg");
  env.emplace_back("MPLCONFIGDIR=/tmp/matplotlib");
  env.emplace_back("XDG_CACHE_HOME=/tmp/.cache");
  return env;
}

// Names bash refuses to assign (readonly): exporting them would fail in the wrapper.
bool IsBashReadonly(std::string_view name) { return common::IsBashReadonlyName(name); }

// Dumps JSON without throwing; invalid UTF-8 in strings becomes U+FFFD.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

bool IsValidUtf8(std::string_view s) {
  try {
    (void)json(std::string(s)).dump();  // the strict handler throws on invalid UTF-8
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

StatusOr<json> ParseInput(std::string_view input_json) {
  if (input_json.empty()) return json::object();
  ASSIGN_OR_RETURN(json input, common::ParseJson(input_json, {}, "input"));
  if (!input.is_object()) return InvalidRequest("input must be a JSON object");
  for (const auto& [key, value] : input.items()) {
    if (!IsValidIdentifier(key)) {
      return InvalidRequest("input key \"" + key + "\" is not a valid identifier");
    }
  }
  return input;
}

Status ValidateEnv(const std::map<std::string, std::string>& env) {
  for (const auto& [name, value] : env) {
    if (!IsValidIdentifier(name)) {
      return InvalidRequest("env name \"" + name + "\" is not a valid identifier");
    }
    if (value.find('\0') != std::string::npos) {
      return InvalidRequest("env value of " + name + " contains a NUL byte");
    }
    if (!IsValidUtf8(value)) return InvalidRequest("env value of " + name + " is not valid UTF-8");
  }
  return Status::Ok();
}

// `export K=$'\xHH...'` for every byte of the value: evaluating it can only assign.
// `from`: where the export list starts in `out` (what precedes it is not part of it).
void AppendShellExport(std::string& out, std::string_view name, std::string_view value,
                       size_t from = 0) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += out.size() == from ? "export " : " ";
  out += name;
  out += "=$'";
  for (unsigned char c : value) {
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  out += '\'';
}

StatusOr<std::string> EncodeShellJob(std::string_view code, const json& input,
                                     const std::map<std::string, std::string>& env,
                                     std::string_view stdin_data) {
  if (code.find('\0') != std::string_view::npos) {
    return InvalidRequest("shell code cannot contain NUL bytes");
  }
  if (stdin_data.find('\0') != std::string_view::npos) {
    return InvalidRequest("stdin: shell jobs cannot read a NUL byte from stdin");
  }
  // With stdin, the header starts with `__kiln_stdin=<N>;` and the N bytes
  // of stdin come first after it, before the code: bash splits the frame at
  // the header's newline with a pattern whose cost grows with the square of
  // the header's length, so bulk data stays out of the header.
  std::string header;
  if (!stdin_data.empty()) header = "__kiln_stdin=" + std::to_string(stdin_data.size()) + ";";
  const size_t exports_at = header.size();
  for (const auto& [name, value] : env) {
    if (IsBashReadonly(name)) return InvalidRequest("env name " + name + " is read-only in bash");
    AppendShellExport(header, name, value, exports_at);
  }
  for (const auto& [key, value] : input.items()) {
    if (IsBashReadonly(key)) return InvalidRequest("input key " + key + " is read-only in bash");
    if (env.count(key) != 0) {
      return InvalidRequest("input key " + key + " is also in env; shell has one namespace");
    }
    std::string text = value.is_string() ? value.get<std::string>() : Dump(value);
    if (text.find('\0') != std::string::npos) {
      return InvalidRequest("input value of " + key + " contains a NUL byte");
    }
    AppendShellExport(header, key, text, exports_at);
  }
  std::string frame;
  frame.reserve(header.size() + stdin_data.size() + code.size() + 2);
  frame += header;
  frame += '\n';
  frame += stdin_data;
  frame += code;
  frame += '.';  // survives $(<...) stripping trailing newlines; the wrapper drops it
  return frame;
}

StatusOr<Runtime::Outcome> ParseShellControl(std::string_view bytes) {
  Runtime::Outcome out;
  size_t nl = bytes.find('\n');
  if (nl == std::string_view::npos || nl == 0) return common::Internal("malformed shell frame");
  int code = 0;
  auto [end, ec] = std::from_chars(bytes.data(), bytes.data() + nl, code);
  if (ec != std::errc() || end != bytes.data() + nl || code < 0 || code > 255) {
    return common::Internal("malformed shell frame: bad exit status");
  }
  out.has_frame = true;
  out.exit_code = code;
  std::string_view rest = bytes.substr(nl + 1);
  if (!rest.empty()) {
    if (rest[0] != 'r') return common::Internal("malformed shell frame: bad result marker");
    out.result_json = Dump(json(std::string(rest.substr(1))));
  }
  return out;
}

// "outputs": [{"mime": m, "text": s} | {"mime": m, "base64": b}, ...]. The
// frame comes from the job's own process: the structure must be right, then
// common::BoundRichOutputs drops bad mime types and what is over the bounds.
Status ParseOutputs(const json& outputs, Runtime::Outcome* out) {
  if (!outputs.is_array()) return common::Internal("malformed control frame: outputs");
  for (const json& o : outputs) {
    auto mime = o.is_object() ? o.find("mime") : o.end();
    if (!o.is_object() || mime == o.end() || !mime->is_string()) {
      return common::Internal("malformed control frame: an output needs a mime string");
    }
    common::protocol::RichOutput r{mime->get<std::string>(), ""};
    if (auto t = o.find("text"); t != o.end() && t->is_string()) {
      r.data = t->get<std::string>();
    } else if (auto b = o.find("base64"); b != o.end() && b->is_string()) {
      auto bytes = common::Base64Decode(b->get<std::string>());
      if (!bytes.ok()) return common::Internal("malformed control frame: output base64");
      r.data = std::move(*bytes);
    } else {
      return common::Internal("malformed control frame: an output needs text or base64");
    }
    out->outputs.push_back(std::move(r));
  }
  if (common::BoundRichOutputs(&out->outputs)) out->outputs_truncated = true;
  return Status::Ok();
}

StatusOr<Runtime::Outcome> ParseJsonControl(std::string_view bytes) {
  // Written by the job's own process (which may forge it): bounded before
  // anything recursive (Dump below) touches it.
  auto parsed = common::ParseJson(bytes, {}, "malformed control frame");
  if (!parsed.ok()) return common::Internal(parsed.status().message());
  json frame = std::move(*parsed);
  if (!frame.is_object()) {
    return common::Internal("malformed control frame: not one JSON object");
  }
  Runtime::Outcome out;
  out.has_frame = true;
  auto it = frame.find("exit_code");
  if (it == frame.end() || !it->is_number_integer() || *it < 0 || *it > 255) {
    return common::Internal("malformed control frame: exit_code must be an integer 0-255");
  }
  out.exit_code = it->get<int>();
  if (it = frame.find("result"); it != frame.end()) out.result_json = Dump(*it);
  if (it = frame.find("error"); it != frame.end()) {
    const json& e = *it;
    auto field = [&e](const char* name) -> const json* {
      auto f = e.find(name);
      return f != e.end() && f->is_string() ? &*f : nullptr;
    };
    if (!e.is_object() || !field("type") || !field("message") || !field("traceback")) {
      return common::Internal("malformed control frame: error needs type, message, traceback");
    }
    out.error = ErrorInfo{field("type")->get<std::string>(), field("message")->get<std::string>(),
                          field("traceback")->get<std::string>()};
  }
  if (it = frame.find("outputs"); it != frame.end()) {
    RETURN_IF_ERROR(ParseOutputs(*it, &out));
  }
  if (it = frame.find("outputs_truncated"); it != frame.end()) {
    if (!it->is_boolean()) return common::Internal("malformed control frame: outputs_truncated");
    out.outputs_truncated = out.outputs_truncated || it->get<bool>();
  }
  for (const auto& [key, value] : frame.items()) {
    if (key != "exit_code" && key != "result" && key != "error" && key != "outputs" &&
        key != "outputs_truncated") {
      return common::Internal("malformed control frame: unknown field " + key);
    }
  }
  return out;
}

Status OverLimit() {
  return Status(Code::kOutputLimit, "result is larger than " +
                                        std::to_string(Runtime::kMaxControlBytes >> 20) + " MiB");
}

StatusOr<Runtime::Outcome> ParseControlOf(Language language, std::string_view bytes) {
  if (bytes.empty()) return Runtime::Outcome{};
  if (bytes.size() > Runtime::kMaxControlBytes) return OverLimit();
  if (language == Language::kShell) return ParseShellControl(bytes);
  return ParseJsonControl(bytes);
}

// A session frame's length line: 1-19 digits, no leading zero (so never 0).
constexpr size_t kMaxLengthDigits = 19;

}  // namespace

StatusOr<Language> ParseLanguage(std::string_view name) {
  if (name == "python") return Language::kPython;
  if (name == "javascript") return Language::kJavaScript;
  if (name == "shell") return Language::kShell;
  return InvalidRequest("unknown language \"" + std::string(name) +
                        "\" (expected python, javascript or shell)");
}

std::string_view LanguageName(Language language) {
  switch (language) {
    case Language::kPython:
      return "python";
    case Language::kJavaScript:
      return "javascript";
    case Language::kShell:
      return "shell";
  }
  return "unknown";
}

bool IsValidIdentifier(std::string_view name) { return common::IsIdentifier(name); }

bool IsValidModulePath(std::string_view name) {
  if (name.empty() || name.size() > 128) return false;
  for (size_t pos = 0; pos <= name.size();) {
    size_t dot = name.find('.', pos);
    if (dot == std::string_view::npos) dot = name.size();
    if (!common::IsIdentifier(name.substr(pos, dot - pos))) return false;
    pos = dot + 1;
  }
  return true;
}

StatusOr<Runtime> Runtime::Create(Language language, const RuntimePaths& paths,
                                  std::vector<std::string> preload, ModuleSet lean_modules) {
  for (const std::string& m : preload) {
    if (!IsValidModulePath(m))
      return common::InvalidRequest("preload: bad module name '" + m + "'");
  }
  const std::string& path = language == Language::kPython       ? paths.python
                            : language == Language::kJavaScript ? paths.node
                                                                : paths.bash;
  std::string what = std::string(LanguageName(language)) + " interpreter " + path;
  if (path.empty() || path[0] != '/') {
    return Status(Code::kRuntimeUnavailable, what + " is not an absolute path");
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return Status(Code::kRuntimeUnavailable, common::ErrnoStatus(what, errno).message());
  }
  if (!S_ISREG(st.st_mode) || ::access(path.c_str(), X_OK) != 0) {
    return Status(Code::kRuntimeUnavailable, what + " is not an executable file");
  }
  if (language != Language::kPython) preload.clear();
  lean_modules.emplace("kiln");  // the wrappers' own (docs/runtimes.md, "Tool callbacks")
  return Runtime(language, path, std::move(preload), std::move(lean_modules));
}

bool Runtime::NeedsPreload(std::string_view code) const {
  return has_preload() && MayImportBeyond(code, *lean_modules_);
}

Launch Runtime::OneShotLaunch(bool preloaded) const {
  Launch launch;
  launch.env = language_ == Language::kPython ? PythonEnv() : BaseEnv();
  switch (language_) {
    case Language::kPython: {
      std::string preload;
      if (preloaded) {
        for (const std::string& m : preload_) preload += (preload.empty() ? "" : ",") + m;
      }
      // -I: ignore PYTHON* variables and the user site; keep site-packages.
      launch.argv = {interpreter_, "-I", "-c", std::string(kPythonOneShotWrapper)};
      // The same wrapper, loaded once by a zygote that forks a sandbox per job,
      // after importing the preloaded modules (comma-separated; none: a
      // second, lean zygote, as its argv differs).
      launch.zygote_argv = {
          interpreter_, "-I", "-c", std::string(kPythonZygote), std::string(kPythonOneShotWrapper),
          preload};
      break;
    }
    case Language::kJavaScript:
      // --experimental-vm-modules: Node 20 refuses vm.Script's
      // importModuleDynamically without it, so the code's import() would fail.
      launch.argv = {interpreter_, "--experimental-vm-modules", "-e",
                     std::string(kJavaScriptOneShotWrapper)};
      break;
    case Language::kShell:
      launch.argv = {interpreter_, "--noprofile", "--norc", "-c", std::string(kShellOneShotWrapper),
                     "bash"};
      break;
  }
  return launch;
}

StatusOr<std::string> Runtime::EncodeJob(std::string_view code, std::string_view input_json,
                                         const std::map<std::string, std::string>& env,
                                         std::string_view stdin_data) const {
  ASSIGN_OR_RETURN(json input, ParseInput(input_json));
  RETURN_IF_ERROR(ValidateEnv(env));
  if (stdin_data.size() > common::protocol::kMaxStdinBytes) {
    return InvalidRequest("stdin: " + std::to_string(stdin_data.size()) +
                          " bytes, above the maximum of " +
                          std::to_string(common::protocol::kMaxStdinBytes));
  }
  if (!IsValidUtf8(stdin_data)) return InvalidRequest("stdin: not valid UTF-8");
  if (language_ == Language::kShell) return EncodeShellJob(code, input, env, stdin_data);
  // Compact JSON escapes control characters, so the header holds no raw newline.
  json head{{"input", std::move(input)}, {"env", env}};
  if (!stdin_data.empty()) head["stdin"] = std::string(stdin_data);  // only when given
  std::string frame = Dump(head);
  frame.reserve(frame.size() + 1 + code.size());
  frame += '\n';
  frame += code;
  return frame;
}

StatusOr<Runtime::Outcome> Runtime::ParseControl(std::string_view control_bytes) const {
  return ParseControlOf(language_, control_bytes);
}

Launch Runtime::SessionLaunch() const {
  Launch launch;
  launch.env = language_ == Language::kPython ? PythonEnv() : BaseEnv();
  switch (language_) {
    case Language::kPython:
      launch.argv = {interpreter_, "-I", "-c", std::string(kPythonSessionDriver)};
      break;
    case Language::kJavaScript:
      launch.argv = {interpreter_, "--experimental-vm-modules", "-e",
                     std::string(kJavaScriptSessionDriver)};
      break;
    case Language::kShell:
      launch.argv = {interpreter_, "--noprofile", "--norc", "-c", std::string(kShellSessionDriver),
                     "bash"};
      break;
  }
  return launch;
}

StatusOr<std::string> Runtime::EncodeExecution(std::string_view code, std::string_view input_json,
                                               const std::map<std::string, std::string>& env,
                                               std::string_view stdin_data) const {
  ASSIGN_OR_RETURN(std::string payload, EncodeJob(code, input_json, env, stdin_data));
  std::string frame = std::to_string(payload.size());
  frame.reserve(frame.size() + 1 + payload.size());
  frame += '\n';
  frame += payload;
  return frame;
}

void ControlStream::Feed(std::string_view bytes) {
  if (broken_) return;
  if (skip_ > 0) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(skip_, bytes.size()));
    skip_ -= n;
    bytes.remove_prefix(n);
  }
  buffer_.append(bytes);
}

std::optional<StatusOr<Runtime::Outcome>> ControlStream::Next() {
  if (broken_) return StatusOr<Runtime::Outcome>(*broken_);
  if (oversized_) {
    if (skip_ > 0) return std::nullopt;
    oversized_ = false;
    return StatusOr<Runtime::Outcome>(OverLimit());
  }
  size_t nl = buffer_.find('\n');
  if (nl == std::string::npos) {
    if (buffer_.size() <= kMaxLengthDigits) return std::nullopt;
    nl = buffer_.size();  // too long to be a length: malformed
  }
  uint64_t length = 0;
  auto [end, ec] = std::from_chars(buffer_.data(), buffer_.data() + nl, length);
  if (nl == 0 || nl > kMaxLengthDigits || buffer_[0] == '0' || ec != std::errc() ||
      end != buffer_.data() + nl) {
    broken_ = common::Internal("malformed session control stream: bad frame length " +
                               Dump(json(buffer_.substr(0, std::min<size_t>(nl, 24)))));
    buffer_.clear();
    return StatusOr<Runtime::Outcome>(*broken_);
  }
  const size_t header = nl + 1;
  if (length > Runtime::kMaxControlBytes) {
    // Skip the body as it arrives instead of buffering it; report at its end.
    size_t here = static_cast<size_t>(std::min<uint64_t>(length, buffer_.size() - header));
    buffer_.erase(0, header + here);
    skip_ = length - here;
    oversized_ = true;
    return Next();
  }
  if (buffer_.size() - header < length) return std::nullopt;
  StatusOr<Runtime::Outcome> outcome =
      ParseControlOf(language_, std::string_view(buffer_).substr(header, length));
  buffer_.erase(0, header + length);
  return outcome;
}

}  // namespace kiln::worker::runtimes
