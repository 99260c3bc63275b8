#include "common/log/logging.hpp"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <algorithm>
#include <mutex>
#include <nlohmann/json.hpp>

namespace kiln::common {
namespace log_internal {

const LogFields*& CurrentFields() {
  thread_local const LogFields* fields = nullptr;
  return fields;
}

}  // namespace log_internal

namespace {

void AppendJsonString(std::string_view s, spdlog::memory_buf_t& dest) {
  std::string quoted =
      nlohmann::json(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  dest.append(quoted.data(), quoted.data() + quoted.size());
}

template <typename Emit>
void ForEachField(const Emit& emit) {
  const LogFields* f = log_internal::CurrentFields();
  if (f == nullptr) return;
  if (!f->job.empty()) emit("job", f->job);
  if (!f->session.empty()) emit("session", f->session);
  if (!f->tenant.empty()) emit("tenant", f->tenant);
  if (!f->worker.empty()) emit("worker", f->worker);
}

// %* in a pattern: the message as a JSON string (quotes and escapes included).
class JsonMessageFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    AppendJsonString(std::string_view(msg.payload.data(), msg.payload.size()), dest);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessageFlag>();
  }
};

// %F: the line's fields, `,"job":"..."` each (JSON) or ` job=...` each (text).
class FieldsFlag : public spdlog::custom_flag_formatter {
 public:
  explicit FieldsFlag(bool json) : json_(json) {}
  void format(const spdlog::details::log_msg&, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    ForEachField([&](std::string_view key, std::string_view value) {
      if (json_) {
        dest.push_back(',');
        AppendJsonString(key, dest);
        dest.push_back(':');
        AppendJsonString(value, dest);
      } else {
        dest.push_back(' ');
        dest.append(key.data(), key.data() + key.size());
        dest.push_back('=');
        dest.append(value.data(), value.data() + value.size());
      }
    });
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<FieldsFlag>(json_);
  }

 private:
  bool json_;
};

std::unique_ptr<spdlog::formatter> MakeFormatter(bool json, const std::string& instance) {
  auto f = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
  f->add_flag<FieldsFlag>('F', json);
  if (json) {
    // The instance is literal text of the pattern: JSON-quoted, % doubled.
    std::string inst;
    if (!instance.empty()) {
      inst = ",\"instance\":";
      for (char c : nlohmann::json(instance).dump(-1, ' ', false,
                                                  nlohmann::json::error_handler_t::replace)) {
        inst += c;
        if (c == '%') inst += '%';
      }
    }
    f->add_flag<JsonMessageFlag>('*').set_pattern(
        R"({"ts":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","component":"%n")" + inst +
        R"(,"msg":%*%F})");
  } else {
    f->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %^%l%$ [%n] %v%F");
  }
  return f;
}

// Every subsystem logger of the process, and how to configure new ones.
struct Registry {
  std::mutex mu;
  LogOptions options;
  spdlog::sink_ptr sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  std::map<std::string, std::shared_ptr<spdlog::logger>, std::less<>> loggers;

  Registry() { sink->set_formatter(MakeFormatter(false, "")); }

  spdlog::level::level_enum LevelOf(const std::string& subsystem) const {
    auto it = options.levels.find(subsystem);
    return spdlog::level::from_str(it != options.levels.end() ? it->second : options.level);
  }
  std::string NameOf(const std::string& subsystem) const {
    return subsystem.empty() ? options.component : options.component + "." + subsystem;
  }
  std::shared_ptr<spdlog::logger> Make(const std::string& subsystem) {
    auto logger = std::make_shared<spdlog::logger>(NameOf(subsystem), sink);
    logger->set_level(LevelOf(subsystem));
    logger->flush_on(spdlog::level::warn);
    return logger;
  }
};

Registry& TheRegistry() {
  static Registry* r = new Registry();  // never destroyed: loggers outlive statics
  return *r;
}

Status CheckLevel(const std::string& key, const std::string& level) {
  if (spdlog::level::from_str(level) == spdlog::level::off && level != "off") {
    return InvalidRequest(key + ": unknown level '" + level +
                          "' (trace, debug, info, warn, error, critical or off)");
  }
  return Status::Ok();
}

}  // namespace

Status ValidateLogOptions(const LogOptions& options) {
  RETURN_IF_ERROR(CheckLevel("log.level", options.level));
  if (options.format != "json" && options.format != "text") {
    return InvalidRequest("log.format: must be text or json, got '" + options.format + "'");
  }
  for (const auto& [subsystem, level] : options.levels) {
    if (!options.subsystems.empty() &&
        std::find(options.subsystems.begin(), options.subsystems.end(), subsystem) ==
            options.subsystems.end()) {
      std::string known;
      for (const auto& s : options.subsystems) known += (known.empty() ? "" : ", ") + s;
      return InvalidRequest("log.levels: unknown subsystem '" + subsystem + "' (known: " + known +
                            ")");
    }
    RETURN_IF_ERROR(CheckLevel("log.levels." + subsystem, level));
  }
  return Status::Ok();
}

Status InitLogging(const LogOptions& options) {
  RETURN_IF_ERROR(ValidateLogOptions(options));
  Registry& r = TheRegistry();
  std::lock_guard lock(r.mu);
  r.options = options;
  r.sink->set_formatter(MakeFormatter(options.format == "json", options.instance));
  // Loggers made before now (statics) take the new names and levels.
  for (auto& [subsystem, logger] : r.loggers) {
    auto fresh = r.Make(subsystem);
    logger->swap(*fresh);
  }
  // Plain spdlog:: calls (libraries, tests) go to the process's own logger.
  spdlog::set_default_logger(r.Make(""));
  return Status::Ok();
}

SubsystemLog::SubsystemLog(std::string_view subsystem) {
  Registry& r = TheRegistry();
  std::lock_guard lock(r.mu);
  auto it = r.loggers.find(subsystem);
  if (it == r.loggers.end()) {
    it = r.loggers.emplace(std::string(subsystem), r.Make(std::string(subsystem))).first;
  }
  logger_ = it->second;
}

}  // namespace kiln::common
