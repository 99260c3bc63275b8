// Runtime: how one language's interpreter runs a one-shot job inside a sandbox.
//
//   ASSIGN_OR_RETURN(Runtime rt, Runtime::Create(Language::kPython, RuntimePaths{}));
//   Launch l = rt.OneShotLaunch();  // start it warm; later write EncodeJob(...) to its fd 0
//
// A warm sandbox runs `l.argv` with the environment `l.env` in /workspace, fds
// 0 = stdin pipe (the job frame, written once and closed by the worker),
// 1/2 = stdout/stderr pipes, 3 = control pipe (write end). The interpreter
// runs a small wrapper (worker/runtimes/wrappers/, embedded at build time) that
// waits for the frame, applies `env`, injects `input`, runs the code and writes
// one control frame to fd 3 before exiting; ParseControl decodes it. Formats,
// semantics and limits: docs/runtimes.md.
//
// A Runtime is an immutable value; any thread may use it concurrently.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/protocol/messages.hpp"
#include "common/status.hpp"

namespace kiln::worker::runtimes {

enum class Language { kPython, kJavaScript, kShell };

// "python", "javascript", "shell" (the API names, exactly); else INVALID_REQUEST.
common::StatusOr<Language> ParseLanguage(std::string_view name);
std::string_view LanguageName(Language language);

// Where the interpreters live on the worker host (and, read-only, in the sandbox).
struct RuntimePaths {
  std::string python = "/usr/bin/python3";
  std::string node = "/usr/bin/node";
  std::string bash = "/bin/bash";
};

// What a sandbox executes: argv[0] is the interpreter's absolute path.
struct Launch {
  std::vector<std::string> argv;
  std::vector<std::string> env;  // "NAME=value"
};

// [A-Za-z_][A-Za-z0-9_]*: the rule for input keys and env names in every language.
bool IsValidIdentifier(std::string_view name);

class Runtime {
 public:
  // The most control-frame bytes ParseControl accepts (a big `result`); the
  // worker should read at most this plus one byte and keep draining the rest.
  static constexpr size_t kMaxControlBytes = 16 << 20;

  // RUNTIME_UNAVAILABLE when the interpreter is not an executable regular file.
  static common::StatusOr<Runtime> Create(Language language, const RuntimePaths& paths);

  Language language() const { return language_; }
  const std::string& interpreter() const { return interpreter_; }

  // argv and base environment of a warm sandbox; independent of any job.
  Launch OneShotLaunch() const;

  // The bytes to write to the warm sandbox's stdin. `input_json` is a JSON
  // object or empty (none). INVALID_REQUEST, with a message for the client,
  // when input is not an object, a key or env name is not an identifier, an
  // env value is not UTF-8 text without NUL, or (shell) the code or a value
  // holds a NUL byte, a key is in both env and input, or a name is read-only in bash.
  common::StatusOr<std::string> EncodeJob(std::string_view code, std::string_view input_json,
                                          const std::map<std::string, std::string>& env) const;

  struct Outcome {
    bool has_frame = false;        // false: the process ended without writing one
    std::optional<int> exit_code;  // as the wrapper saw it; the wait status is authoritative
    std::string result_json;       // JSON text of `result`; empty when unset
    std::optional<common::protocol::ErrorInfo> error;  // uncaught exception, unserializable result
  };
  // Decodes everything read from fd 3. Empty input is a valid "no frame"
  // outcome (`exit`, os._exit, a crash). Malformed frames (user code can write
  // to fd 3 too) are INTERNAL; over kMaxControlBytes is OUTPUT_LIMIT. Never throws.
  common::StatusOr<Outcome> ParseControl(std::string_view control_bytes) const;

 private:
  Runtime(Language language, std::string interpreter)
      : language_(language), interpreter_(std::move(interpreter)) {}

  Language language_;
  std::string interpreter_;
};

}  // namespace kiln::worker::runtimes
