#include "common/log/logging.hpp"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

namespace kiln::common {
namespace {

// %* in a pattern: the message as a JSON string (quotes and escapes included).
class JsonMessageFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    std::string s = nlohmann::json(std::string(msg.payload.data(), msg.payload.size()))
                        .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    dest.append(s.data(), s.data() + s.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessageFlag>();
  }
};

}  // namespace

Status InitLogging(const LogOptions& options) {
  auto level = spdlog::level::from_str(options.level);
  if (level == spdlog::level::off && options.level != "off") {
    return InvalidRequest("log.level: unknown level '" + options.level + "'");
  }
  auto logger = std::make_shared<spdlog::logger>(options.component,
                                                 std::make_shared<spdlog::sinks::stderr_sink_mt>());
  if (options.format == "json") {
    auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
    formatter->add_flag<JsonMessageFlag>('*').set_pattern(
        R"({"ts":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","component":"%n","msg":%*})");
    logger->set_formatter(std::move(formatter));
  } else if (options.format == "text") {
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [%n] %v");
  } else {
    return InvalidRequest("log.format: must be text or json, got '" + options.format + "'");
  }
  logger->set_level(level);
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(std::move(logger));
  return Status::Ok();
}

}  // namespace kiln::common
