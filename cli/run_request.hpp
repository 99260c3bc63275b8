// The pure half of `kiln run`: turning flag values into a submit request body.
//
//   ASSIGN_OR_RETURN(nlohmann::json input, ParseInputs({"n=3", "name=ada"}, std::nullopt));
//   nlohmann::json body = BuildSubmitBody(request);   // POST /v1/executions
//
// No I/O here (commands/run.cpp reads files and stdin); every function is
// deterministic and safe from any thread. Errors are INVALID_REQUEST with a
// message naming the flag.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/relative_path.hpp"
#include "common/status.hpp"

namespace kiln::cli {

// "python", "javascript" or "shell" for a --lang value; also accepts the
// aliases py, js, node, sh, bash.
common::StatusOr<std::string> NormalizeLanguage(const std::string& lang);

// The language a file's extension implies: .py -> python, .js/.mjs/.cjs ->
// javascript, .sh/.bash -> shell; nullopt otherwise.
std::optional<std::string> LanguageFromPath(const std::string& path);

// `--input k=v` values (v is JSON when it parses as JSON, else a string) merged
// into the object `--input-json` gives. A key given twice is an error.
common::StatusOr<nlohmann::json> ParseInputs(const std::vector<std::string>& pairs,
                                             const std::optional<std::string>& input_json);

// `--env K=V` values. K is a shell identifier; V may contain '='.
common::StatusOr<std::map<std::string, std::string>> ParseEnv(
    const std::vector<std::string>& pairs);

// `--file PATH[:DEST]`: DEST defaults to PATH's file name.
struct FileSpec {
  std::string local_path;
  std::string dest;
};
common::StatusOr<FileSpec> ParseFileSpec(const std::string& spec);

// A workspace-relative path (as the broker accepts in `files`/returns in the
// record): the rule of common/relative_path.hpp.
using common::CheckRelativePath;

// Everything `kiln run` sends.
struct RunRequest {
  std::string language;
  std::string code;
  std::string session_id;       // empty: none
  std::string conversation_id;  // empty: none
  nlohmann::json input = nlohmann::json::object();
  struct File {
    std::string dest;
    std::string content;  // raw bytes; base64-encoded into the body
  };
  std::vector<File> files;
  std::vector<std::string> collect;
  std::map<std::string, std::string> env;
  std::vector<std::string> packages;  // installed before the code runs (docs/api.md)
  // Network on request (docs/api.md, "Network"): `network: true`, or the
  // destinations listed (which imply it).
  bool network = false;
  std::vector<std::string> network_allow;
  std::optional<uint64_t> timeout_ms;
  std::optional<uint64_t> memory_mb;
  std::optional<uint64_t> cpu_ms;
  std::optional<uint64_t> max_output_bytes;
  std::optional<uint64_t> max_pids;
  bool wait = true;
};

// The JSON body for POST /v1/executions; fields left at their defaults are
// omitted so the broker's configured defaults apply.
nlohmann::json BuildSubmitBody(const RunRequest& request);

// How long to wait for a `wait: true` answer: the job's timeout plus 30 s, or
// 330 s when the timeout is left to the broker; a job with packages may
// first spend up to protocol::kMaxPackageInstallMs installing them.
std::chrono::seconds WaitReadTimeout(std::optional<uint64_t> timeout_ms, bool packages = false);

}  // namespace kiln::cli
