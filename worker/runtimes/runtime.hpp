// Runtime: how one language's interpreter runs a one-shot job, or a session's
// executions, inside a sandbox.
//
//   ASSIGN_OR_RETURN(Runtime rt, Runtime::Create(Language::kPython, RuntimePaths{}));
//   Launch l = rt.OneShotLaunch();  // start it warm; later write EncodeJob(...) to its fd 0
//
// A warm sandbox runs `l.argv` with the environment `l.env` in /workspace, fds
// 0 = stdin pipe (the job frame, written once and closed by the worker),
// 1/2 = stdout/stderr pipes, 3 = control pipe (write end). The interpreter
// runs a small wrapper (worker/runtimes/wrappers/, embedded at build time) that
// waits for the frame, applies `env`, injects `input`, puts the job's stdin on
// fd 0, runs the code and writes one control frame to fd 3 before exiting
// (exit code, `result`, error, rich outputs); ParseControl decodes it.
//
// A session sandbox instead runs `SessionLaunch()`: a long-lived REPL driver
// that reads one EncodeExecution(...) frame after another from fd 0 (kept
// open) and answers each with one length-prefixed control frame on fd 3,
// which a ControlStream splits and decodes. Formats, semantics and limits:
// docs/runtimes.md ("Session drivers").
//
// A Runtime is an immutable value; any thread may use it concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/protocol/messages.hpp"
#include "common/status.hpp"
#include "worker/runtimes/python_imports.hpp"

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
  // Set where a zygote can stand in for `argv` (sandbox.hpp, SpawnSpec):
  // an interpreter that has loaded the same wrapper and forks it per sandbox.
  std::vector<std::string> zygote_argv;
};

// [A-Za-z_][A-Za-z0-9_]*: the rule for input keys and env names in every language.
bool IsValidIdentifier(std::string_view name);
// Identifiers joined by dots, at most 128 bytes ("numpy", "matplotlib.pyplot").
bool IsValidModulePath(std::string_view name);

class Runtime {
 public:
  // The most control-frame bytes ParseControl accepts (a big `result`); the
  // worker should read at most this plus one byte and keep draining the rest.
  static constexpr size_t kMaxControlBytes = 16 << 20;

  // RUNTIME_UNAVAILABLE when the interpreter is not an executable regular file.
  // `preload` (python only; IsValidModulePath names): modules the zygote
  // imports before it forks, so jobs find them loaded. `lean_modules`
  // (python only): the top-level modules a job may import and still be
  // served by the zygote without the preloads (the interpreter's standard
  // library, inventory.hpp's PythonStdlibModules): see NeedsPreload.
  static common::StatusOr<Runtime> Create(Language language, const RuntimePaths& paths,
                                          std::vector<std::string> preload = {},
                                          ModuleSet lean_modules = {});

  Language language() const { return language_; }
  const std::string& interpreter() const { return interpreter_; }
  // Whether one-shot sandboxes come in two kinds (python with preloads):
  // OneShotLaunch(true) and OneShotLaunch(false) differ.
  bool has_preload() const { return !preload_.empty(); }

  // argv and base environment of a warm sandbox; independent of any job.
  // `preloaded` false (python): the zygote that has loaded only the wrapper,
  // a smaller process whose forks cost less (docs/runtimes.md, "Package
  // sets"); the same as true when there is nothing to preload.
  Launch OneShotLaunch(bool preloaded = true) const;

  // Whether a one-shot job with this code should run in a preloaded
  // sandbox: there are preloads, and the code may import a module beyond
  // `lean_modules` (python_imports.hpp; the wrapper's `kiln` counts as
  // known). Only speed depends on it: every sandbox can import everything.
  bool NeedsPreload(std::string_view code) const;

  // The bytes to write to the warm sandbox's stdin. `input_json` is a JSON
  // object or empty (none). `stdin_data` is what the code then reads on its
  // own fd 0 (the wrapper puts it there; empty: fd 0 is at EOF).
  // INVALID_REQUEST, with a message for the client, when input is not an
  // object, a key or env name is not an identifier, an env value is not UTF-8
  // text without NUL, stdin is over kMaxStdinBytes or not UTF-8, or (shell)
  // the code, a value or stdin holds a NUL byte, a key is in both env and
  // input, or a name is read-only in bash.
  common::StatusOr<std::string> EncodeJob(std::string_view code, std::string_view input_json,
                                          const std::map<std::string, std::string>& env,
                                          std::string_view stdin_data = {}) const;

  struct Outcome {
    bool has_frame = false;        // false: the process ended without writing one
    std::optional<int> exit_code;  // as the wrapper saw it; the wait status is authoritative
    std::string result_json;       // JSON text of `result`; empty when unset
    std::optional<common::protocol::ErrorInfo> error;  // uncaught exception, unserializable result
    // Rich outputs (python: figures, the echoed last expression), already
    // bounded by common::BoundRichOutputs; truncated when some were left out
    // (by the wrapper or here).
    std::vector<common::protocol::RichOutput> outputs;
    bool outputs_truncated = false;
  };
  // Decodes everything read from fd 3. Empty input is a valid "no frame"
  // outcome (`exit`, os._exit, a crash). Malformed frames (user code can write
  // to fd 3 too) are INTERNAL; over kMaxControlBytes is OUTPUT_LIMIT. Never throws.
  common::StatusOr<Outcome> ParseControl(std::string_view control_bytes) const;

  // ---- Sessions (docs/runtimes.md, "Session drivers")

  // argv and base environment (the same as OneShotLaunch's) of a session's
  // driver. fds as for a one-shot, but fd 0 stays open between executions.
  Launch SessionLaunch() const;

  // One execution frame for a running driver's fd 0: "<N>\n" followed by the N
  // bytes EncodeJob would produce. Same validation and errors as EncodeJob.
  common::StatusOr<std::string> EncodeExecution(std::string_view code, std::string_view input_json,
                                                const std::map<std::string, std::string>& env,
                                                std::string_view stdin_data = {}) const;

 private:
  Runtime(Language language, std::string interpreter, std::vector<std::string> preload,
          ModuleSet lean_modules)
      : language_(language),
        interpreter_(std::move(interpreter)),
        preload_(std::move(preload)),
        lean_modules_(std::make_shared<const ModuleSet>(std::move(lean_modules))) {}

  Language language_;
  std::string interpreter_;
  std::vector<std::string> preload_;
  std::shared_ptr<const ModuleSet> lean_modules_;  // shared: a Runtime is copied freely
};

// ControlStream: splits what a session driver writes to fd 3 ("<N>\n" + N
// bytes, one frame per execution) into frames and decodes each with
// Runtime::ParseControl.
//
//   ControlStream stream(runtime.language());
//   stream.Feed(bytes_read_from_fd3);
//   while (auto outcome = stream.Next()) HandleEndOfExecution(*outcome);
//
// Next() gives, per frame, the Outcome, or the error ParseControl gives for a
// malformed body (INTERNAL; the stream stays in step), or OUTPUT_LIMIT for a
// frame over Runtime::kMaxControlBytes (its bytes are skipped, not buffered;
// the error comes once the whole frame went by). A malformed length line
// (not 1-19 digits without leading zero, then "\n") is INTERNAL and breaks
// the stream for good: every later Next() repeats that error and Feed()
// ignores its input; the session's driver should then be killed.
// Call Next() until it returns nullopt after every Feed(): the bytes of frames
// not yet taken stay buffered.
//
// Not thread-safe: one owner (the worker's session, on its event loop).
class ControlStream {
 public:
  explicit ControlStream(Language language) : language_(language) {}

  void Feed(std::string_view bytes);
  std::optional<common::StatusOr<Runtime::Outcome>> Next();

  // True once the framing is lost (see above).
  bool broken() const { return broken_.has_value(); }
  // Bytes received but not yet taken by Next() (skipped bytes not included).
  size_t buffered() const { return buffer_.size(); }

 private:
  Language language_;
  std::string buffer_;      // bytes from the start of the next frame on
  uint64_t skip_ = 0;       // bytes of an oversized frame still to discard
  bool oversized_ = false;  // an oversized frame is being skipped
  std::optional<common::Status> broken_;
};

}  // namespace kiln::worker::runtimes
