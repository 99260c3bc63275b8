// LogOptions: how a process logs (levels per subsystem, text or JSON lines),
// as config files state it. Light on purpose: config headers include it;
// the logging itself is common/log/logging.hpp.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.hpp"

namespace kiln::common {

struct LogOptions {
  std::string component = "kiln";  // the process: broker, worker, cli
  std::string instance;            // this process's id (JSON lines carry it as "instance")
  std::string level = "info";      // trace, debug, info, warn, error, critical, off
  std::string format = "text";     // text or json
  // Per-subsystem levels overriding `level` ("scheduler" -> "debug").
  std::map<std::string, std::string> levels;
  // When non-empty, the subsystem names `levels` may use; others are refused
  // so a typo does not silently keep a subsystem quiet.
  std::vector<std::string> subsystems;
};

// The checks InitLogging makes (levels, format, subsystem names), for config
// loaders; errors name the key ("log.levels.schedular: unknown subsystem").
Status ValidateLogOptions(const LogOptions& options);

}  // namespace kiln::common
