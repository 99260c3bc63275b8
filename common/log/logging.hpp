// Process-wide logging (spdlog) shared by broker, worker and CLI: one logger
// per subsystem, each with its own level, and the ids a line is about as
// structured fields.
//
//   RETURN_IF_ERROR(InitLogging({.component = "broker", .level = "info", .format = "json",
//                                .levels = {{"scheduler", "debug"}}}));
//   const SubsystemLog log("scheduler");
//   log.Info({.job = id, .tenant = t, .worker = w}, "job ended {}", status);
//
// Text lines for people (`... [broker.scheduler] job ended failed job=j-1 tenant=t`),
// or JSON lines for log pipelines: one object per line with ts, level,
// component ("broker.scheduler"), msg and each non-empty id (job, session,
// tenant, worker) as a top-level key, properly escaped. Logs go to stderr.
// In text lines the message and the ids are escaped as well (EscapeLogText),
// so a job id or a routing id holding a newline cannot forge a line.
//
// A line an untrusted party can trigger at will goes through a LogLimiter
// (common/log/log_limiter.hpp): `kLog.Warn(limit, {...}, "...")`.
//
// InitLogging: once from main() before other threads start. SubsystemLog and
// its methods: any thread (spdlog's sinks are thread-safe; the fields travel
// through a thread_local while the calling thread formats the line).
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/log/log_limiter.hpp"
#include "common/log/log_options.hpp"
#include "common/status.hpp"

namespace kiln::common {

Status InitLogging(const LogOptions& options);

// The ids a log line is about; empty ones are left out.
struct LogFields {
  std::string_view job;
  std::string_view session;
  std::string_view tenant;
  std::string_view worker;
};

// `s` as text lines carry it: printable ASCII and valid UTF-8 as they are,
// `\\` for a backslash, `\n` `\r` `\t`, and `\xNN` for each byte of any other
// C0 or C1 control, DEL, U+2028/U+2029 (line breaks to some viewers), the
// bidirectional controls (U+202A-202E, U+2066-2069), and every byte that is
// not part of valid UTF-8. Appends to `out`.
void EscapeLogText(std::string_view s, std::string* out);

namespace log_internal {
// Set while the calling thread formats one line (see SubsystemLog::Log).
const LogFields*& CurrentFields();
}  // namespace log_internal

// The logger of one subsystem of this process. Cheap to construct (a registry
// lookup); a static per .cpp file is the usual use. Loggers made before
// InitLogging are reconfigured by it.
class SubsystemLog {
 public:
  explicit SubsystemLog(std::string_view subsystem);

  template <typename... Args>
  void Log(spdlog::level::level_enum level, const LogFields& fields,
           fmt::format_string<Args...> format, Args&&... args) const {
    if (!logger_->should_log(level)) return;
    const LogFields*& current = log_internal::CurrentFields();
    current = &fields;
    logger_->log(level, format, std::forward<Args>(args)...);
    current = nullptr;
  }
  // Rate-limited: writes the line only when `limit` allows it, with
  // " (N similar lines suppressed)" appended when it left lines out.
  template <typename... Args>
  void Log(LogLimiter& limit, spdlog::level::level_enum level, const LogFields& fields,
           fmt::format_string<Args...> format, Args&&... args) const {
    if (!logger_->should_log(level)) return;
    const std::optional<uint64_t> suppressed = limit.Allow();
    if (!suppressed) return;
    if (*suppressed == 0) return Log(level, fields, format, std::forward<Args>(args)...);
    Log(level, fields, "{} ({} similar lines suppressed)",
        fmt::format(format, std::forward<Args>(args)...), *suppressed);
  }
  template <typename... Args>
  void Info(LogLimiter& limit, const LogFields& f, fmt::format_string<Args...> format,
            Args&&... args) const {
    Log(limit, spdlog::level::info, f, format, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void Warn(LogLimiter& limit, const LogFields& f, fmt::format_string<Args...> format,
            Args&&... args) const {
    Log(limit, spdlog::level::warn, f, format, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void Error(LogLimiter& limit, const LogFields& f, fmt::format_string<Args...> format,
             Args&&... args) const {
    Log(limit, spdlog::level::err, f, format, std::forward<Args>(args)...);
  }

  template <typename... Args>
  void Debug(const LogFields& f, fmt::format_string<Args...> format, Args&&... args) const {
    Log(spdlog::level::debug, f, format, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void Info(const LogFields& f, fmt::format_string<Args...> format, Args&&... args) const {
    Log(spdlog::level::info, f, format, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void Warn(const LogFields& f, fmt::format_string<Args...> format, Args&&... args) const {
    Log(spdlog::level::warn, f, format, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void Error(const LogFields& f, fmt::format_string<Args...> format, Args&&... args) const {
    Log(spdlog::level::err, f, format, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void Critical(const LogFields& f, fmt::format_string<Args...> format, Args&&... args) const {
    Log(spdlog::level::critical, f, format, std::forward<Args>(args)...);
  }

  bool enabled(spdlog::level::level_enum level) const { return logger_->should_log(level); }

 private:
  std::shared_ptr<spdlog::logger> logger_;
};

}  // namespace kiln::common
