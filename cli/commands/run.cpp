// `kiln run`: submit code, wait for it, replay its output, exit with its status.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/commands/command.hpp"
#include "cli/execution_follower.hpp"
#include "cli/exit_codes.hpp"
#include "cli/run_request.hpp"
#include "common/base64.hpp"

namespace kiln::cli {
namespace {

using common::InvalidRequest;
using common::Status;
using common::StatusOr;
using nlohmann::json;

constexpr char kFooter[] = R"txt(Examples:
  kiln run -l python -c 'print(6 * 7)'
  kiln run script.py --input n=10 --input 'names=["a","b"]'
  echo 'echo $GREETING' | kiln run -l shell --env GREETING=hello
  kiln run plot.py --file data.csv --collect 'out/*.png' --output-dir results
  kiln run -l python -c 'import tabulate' --package tabulate==0.9.0
  kiln run -l shell -c 'curl -sS https://api.github.com/zen' --allow api.github.com:443
  kiln run -l python -c 'x = 1' --session s1 && kiln run -l python -c 'print(x)' --session s1
  kiln run job.js --no-wait            # prints the id; then: kiln status <id>
  kiln run long.py --stream            # output as it is produced
  kiln run -l python -c 'x = 1' --session s1 --conversation chat-7

The exit status follows the job: its own exit code when it fails, 124 timed out,
125 memory exceeded, 130 cancelled, 77 rejected, 69 infrastructure error,
64 usage or request error (see docs/cli.md).)txt";

struct RunFlags {
  std::string file;
  std::string lang;
  std::string code;
  std::string session;
  std::vector<std::string> inputs;
  std::string input_json;
  std::vector<std::string> files;
  std::vector<std::string> collect;
  std::vector<std::string> env;
  std::vector<std::string> packages;
  bool network = false;
  std::vector<std::string> allow;
  uint64_t timeout_ms = 0;
  uint64_t memory_mb = 0;
  uint64_t cpu_ms = 0;
  uint64_t max_output_bytes = 0;
  uint64_t max_pids = 0;
  std::string conversation;
  bool no_wait = false;
  bool stream = false;
  bool json = false;
  std::string output_dir;
  std::string idempotency_key;
  // Which optional flags were given (CLI11 counts).
  CLI::Option* code_opt = nullptr;
  CLI::Option* input_json_opt = nullptr;
  CLI::Option* timeout_opt = nullptr;
  CLI::Option* memory_opt = nullptr;
  CLI::Option* cpu_opt = nullptr;
  CLI::Option* max_output_opt = nullptr;
  CLI::Option* max_pids_opt = nullptr;
};

StatusOr<std::string> ReadLocalFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidRequest("cannot read " + what + " " + path + ": " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return InvalidRequest("cannot read " + what + " " + path);
  return text.str();
}

StatusOr<std::string> ReadStdin() {
  std::ostringstream text;
  text << std::cin.rdbuf();
  if (std::cin.bad()) return InvalidRequest("cannot read code from stdin");
  return text.str();
}

StatusOr<RunRequest> BuildRequest(const RunFlags& f) {
  const bool from_flag = f.code_opt->count() > 0;
  const bool from_file = !f.file.empty() && f.file != "-";
  if (from_flag && !f.file.empty()) {
    return InvalidRequest("give the code either with -c or as FILE, not both");
  }
  RunRequest r;
  if (!f.lang.empty()) {
    ASSIGN_OR_RETURN(r.language, NormalizeLanguage(f.lang));
  } else if (from_file) {
    auto lang = LanguageFromPath(f.file);
    if (!lang) {
      return InvalidRequest("cannot tell the language of " + f.file +
                            " from its extension; pass --lang python|javascript|shell");
    }
    r.language = *lang;
  } else {
    return InvalidRequest("pass --lang python|javascript|shell (code from -c or stdin)");
  }
  ASSIGN_OR_RETURN(
      r.input, ParseInputs(f.inputs,
                           f.input_json_opt->count() ? std::optional(f.input_json) : std::nullopt));
  ASSIGN_OR_RETURN(r.env, ParseEnv(f.env));
  for (const auto& spec : f.files) {
    ASSIGN_OR_RETURN(FileSpec fs, ParseFileSpec(spec));
    ASSIGN_OR_RETURN(std::string content, ReadLocalFile(fs.local_path, "--file"));
    r.files.push_back({fs.dest, std::move(content)});
  }
  r.collect = f.collect;
  r.packages = f.packages;
  r.network = f.network;
  r.network_allow = f.allow;
  r.session_id = f.session;
  r.conversation_id = f.conversation;
  if (f.timeout_opt->count()) r.timeout_ms = f.timeout_ms;
  if (f.memory_opt->count()) r.memory_mb = f.memory_mb;
  if (f.cpu_opt->count()) r.cpu_ms = f.cpu_ms;
  if (f.max_output_opt->count()) r.max_output_bytes = f.max_output_bytes;
  if (f.max_pids_opt->count()) r.max_pids = f.max_pids;
  r.wait = !f.no_wait && !f.stream;

  // The code last, so flag errors show before we block on a terminal's stdin.
  if (from_flag) {
    r.code = f.code;
  } else if (from_file) {
    ASSIGN_OR_RETURN(r.code, ReadLocalFile(f.file, "FILE"));
  } else {
    if (f.file.empty() && isatty(STDIN_FILENO)) {
      return InvalidRequest("no code: pass -c CODE, a FILE, or pipe the code on stdin");
    }
    ASSIGN_OR_RETURN(r.code, ReadStdin());
  }
  return r;
}

// Writes the record's collected files under `dir`.
Status WriteCollectedFiles(const json& files, const std::string& dir) {
  namespace fs = std::filesystem;
  for (const auto& f : files) {
    const std::string path = f.value("path", "");
    if (auto st = CheckRelativePath(path); !st.ok()) {
      return st.WithContext("collected file refused");
    }
    ASSIGN_OR_RETURN(std::string content, common::Base64Decode(f.value("content_base64", "")));
    fs::path target = fs::path(dir) / path;
    std::error_code ec;
    fs::create_directories(target.parent_path(), ec);
    if (ec)
      return common::Internal("cannot create " + target.parent_path().string() + ": " +
                              ec.message());
    std::ofstream out(target, std::ios::binary | std::ios::trunc);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.close();
    if (!out) return common::Internal("cannot write " + target.string());
  }
  return Status::Ok();
}

// The default (non --json) rendering of a finished record; without
// `with_output` its stdout and stderr (already streamed) are left out.
void PrintRecord(const json& record, bool will_write_files, bool with_output) {
  if (with_output) {
    WriteOut(record.value("stdout", ""));
    WriteErr(record.value("stderr", ""));
  }
  const std::string status = record.value("status", "");
  const std::string id = record.value("id", "");
  if (auto it = record.find("result"); it != record.end() && !it->is_null()) {
    WriteErr("result: " + it->dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
  }
  if (record.value("truncated", false)) WriteErr("kiln: output truncated\n");
  if (auto it = record.find("warnings"); it != record.end() && it->is_array()) {
    for (const auto& w : *it) {
      WriteErr("kiln: warning: " + (w.is_string() ? w.get<std::string>() : w.dump()) + "\n");
    }
  }
  auto error = record.find("error");
  const bool has_error = error != record.end() && error->is_object();
  const bool stderr_empty = record.value("stderr", "").empty();
  if (status != "succeeded" && (status != "failed" || (has_error && stderr_empty))) {
    std::string line = "kiln: " + id + " " + status;
    if (has_error) line += ": " + error->value("code", "") + ": " + error->value("message", "");
    WriteErr(line + "\n");
  }
  auto files = record.find("files");
  if (!will_write_files && files != record.end() && files->is_array() && !files->empty()) {
    WriteErr("kiln: " + std::to_string(files->size()) +
             " collected file(s) not written; pass --output-dir DIR\n");
  }
}

// --stream: prints each output chunk as it arrives (or, with --json, every
// event as one JSON line); returns the final record.
StatusOr<json> FollowLive(ApiClient& client, const std::string& id, bool as_json) {
  ExecutionFollower follower(id, [as_json](const FollowedEvent& e) {
    if (as_json) {
      json line = {{"event", e.event}, {"id", e.id}, {"data", e.data}};
      WriteOut(line.dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
      return;
    }
    if (e.event != "output_chunk" || !e.data.is_object()) return;
    auto data = e.data.find("data");
    if (data == e.data.end() || !data->is_string()) return;
    auto stream = e.data.find("stream");
    if (stream != e.data.end() && *stream == "stderr") {
      WriteErr(data->get<std::string>());
    } else {
      WriteOut(data->get<std::string>());
    }
  });
  return follower.Follow(client);
}

int Run(const RunFlags& flags, const GlobalFlags& globals) {
  auto request = BuildRequest(flags);
  if (!request.ok()) return ReportError(request.status());
  auto client = Connect(globals, TokenRole::kTenant);
  if (!client.ok()) return ReportError(client.status());

  ApiClient::SubmitOptions options;
  options.idempotency_key = flags.idempotency_key;
  if (request->wait) {
    options.read_timeout = WaitReadTimeout(request->timeout_ms, !request->packages.empty());
  }
  auto answer = (*client)->Submit(BuildSubmitBody(*request), options);
  if (!answer.ok()) return ReportError(answer.status());

  if (flags.no_wait) {
    WriteOut(flags.json ? JsonText(*answer) : answer->value("id", "") + "\n");
    return kExitOk;
  }
  if (flags.stream) {
    answer = FollowLive(**client, answer->value("id", ""), flags.json);
    if (!answer.ok()) return ReportError(answer.status());
  }
  const json& record = *answer;
  const bool write_files = !flags.output_dir.empty();
  if (flags.json) {
    if (!flags.stream) WriteOut(JsonText(record));  // streamed: the end event carried it
  } else {
    PrintRecord(record, write_files, /*with_output=*/!flags.stream);
  }
  int code = ExitCodeForRecord(record);
  if (code == kExitPending) {
    const std::string id = record.value("id", "");
    WriteErr("kiln: " + id + " is still " + record.value("status", "") +
             " after the broker stopped waiting; follow it with: kiln status " + id + "\n");
    return code;
  }
  auto files = record.find("files");
  if (write_files && files != record.end() && files->is_array()) {
    if (auto st = WriteCollectedFiles(*files, flags.output_dir); !st.ok()) {
      WriteErr("kiln: " + st.message() + "\n");
      if (code == kExitOk) code = kExitIoError;
    }
  }
  return code;
}

}  // namespace

Command AddRunCommand(CLI::App& root, const GlobalFlags* globals) {
  auto flags = std::make_shared<RunFlags>();
  CLI::App* app = root.add_subcommand("run", "Run code in the cluster and wait for it");
  app->footer(kFooter);
  app->add_option("FILE", flags->file,
                  "File with the code ('-' for stdin); its extension sets the language");
  app->add_option("-l,--lang", flags->lang, "python, javascript or shell (also py, js, sh)")
      ->type_name("LANG");
  flags->code_opt = app->add_option("-c,--code", flags->code, "The code itself")->type_name("CODE");
  app->add_option("--session", flags->session,
                  "Run in this session (created on first use; state persists between runs)")
      ->type_name("ID");
  app->add_option("--conversation", flags->conversation,
                  "Tag the job (and its session) with a conversation id, for kiln sessions")
      ->type_name("ID");
  app->add_option("--input", flags->inputs,
                  "An input variable; v as JSON when it parses, else a string; repeatable")
      ->type_name("K=V")
      ->allow_extra_args(false);
  flags->input_json_opt =
      app->add_option("--input-json", flags->input_json, "All inputs as one JSON object")
          ->type_name("JSON");
  app->add_option("--file", flags->files,
                  "Upload a local file into the workspace (as DEST, default its name); repeatable")
      ->type_name("PATH[:DEST]")
      ->allow_extra_args(false);
  app->add_option("--collect", flags->collect,
                  "Return workspace files matching GLOB after the run; repeatable")
      ->type_name("GLOB")
      ->allow_extra_args(false);
  app->add_option("--env", flags->env, "An environment variable for the job; repeatable")
      ->type_name("K=V")
      ->allow_extra_args(false);
  app->add_option("--package", flags->packages,
                  "Install a package first (python NAME or NAME==VERSION, javascript NAME or "
                  "NAME@VERSION) from the cluster's package index; repeatable")
      ->type_name("SPEC")
      ->allow_extra_args(false);
  app->add_flag("--network", flags->network,
                "Let the job reach the network through the cluster's egress gateway: the "
                "destinations the tenant's allowlist names");
  app->add_option("--allow", flags->allow,
                  "Let the job reach only this destination of the tenant's allowlist (implies "
                  "--network); repeatable")
      ->type_name("HOST:PORT")
      ->allow_extra_args(false);
  flags->timeout_opt =
      app->add_option("--timeout", flags->timeout_ms,
                      "Wall-clock limit in milliseconds (broker default if unset)")
          ->type_name("MS")
          ->check(CLI::Validator(CLI::Range(uint64_t{1}, uint64_t{1000000000})).description(""));
  flags->memory_opt =
      app->add_option("--memory", flags->memory_mb, "Memory limit in MB (broker default if unset)")
          ->type_name("MB")
          ->check(CLI::Validator(CLI::Range(uint64_t{1}, uint64_t{1000000000})).description(""));
  flags->cpu_opt =
      app->add_option("--cpu", flags->cpu_ms,
                      "CPU time limit in milliseconds (broker default if unset)")
          ->type_name("MS")
          ->check(CLI::Validator(CLI::Range(uint64_t{1}, uint64_t{1000000000})).description(""));
  flags->max_output_opt =
      app->add_option("--max-output", flags->max_output_bytes,
                      "Cap on stdout + stderr in bytes (broker default if unset)")
          ->type_name("BYTES")
          ->check(CLI::Validator(CLI::Range(uint64_t{1}, uint64_t{1000000000000})).description(""));
  flags->max_pids_opt =
      app->add_option("--max-pids", flags->max_pids,
                      "Cap on processes and threads (broker default if unset)")
          ->type_name("N")
          ->check(CLI::Validator(CLI::Range(uint64_t{1}, uint64_t{1000000})).description(""));
  app->add_option("--output-dir", flags->output_dir,
                  "Write collected files under DIR (by their workspace path)")
      ->type_name("DIR");
  app->add_option("--idempotency-key", flags->idempotency_key,
                  "Retrying with the same key returns the same job instead of a new one")
      ->type_name("KEY");
  CLI::Option* no_wait =
      app->add_flag("--no-wait", flags->no_wait, "Return at once, printing the execution id");
  app->add_flag("--stream", flags->stream,
                "Print the output live as the job produces it (with --json: one JSON line per "
                "event)")
      ->excludes(no_wait);
  app->add_flag("--json", flags->json, "Print the full execution record as JSON");
  return {app, [flags, globals] { return Run(*flags, *globals); }};
}

}  // namespace kiln::cli
