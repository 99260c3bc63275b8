// Process-wide logging setup (spdlog) shared by broker, worker and CLI.
//
//   RETURN_IF_ERROR(InitLogging({.component = "broker", .level = "info", .format = "json"}));
//   spdlog::info("worker {} registered", id);
//
// Text lines for people, or JSON lines (one object per line with ts, level,
// component and msg, properly escaped) for log pipelines. Logs go to stderr.
// Call once from main() before other threads start; spdlog itself is thread-safe.
#pragma once

#include <string>

#include "common/status.hpp"

namespace kiln::common {

struct LogOptions {
  std::string component = "kiln";
  std::string level = "info";   // trace, debug, info, warn, error, off
  std::string format = "text";  // text or json
};

Status InitLogging(const LogOptions& options);

}  // namespace kiln::common
