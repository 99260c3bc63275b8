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

// The length of the valid UTF-8 sequence at s[i] (Unicode's table 3-7: no
// overlong forms, no surrogates, nothing above U+10FFFF), or 0.
size_t Utf8SequenceAt(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c == 0xE0) {
    n = 3, lo = 0xA0;
  } else if (c == 0xED) {
    n = 3, hi = 0x9F;
  } else if (c >= 0xE1 && c <= 0xEF) {
    n = 3;
  } else if (c == 0xF0) {
    n = 4, lo = 0x90;
  } else if (c == 0xF4) {
    n = 4, hi = 0x8F;
  } else if (c >= 0xF1 && c <= 0xF3) {
    n = 4;
  } else {
    return 0;
  }
  if (i + n > s.size() || byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return n;
}

// Valid UTF-8 that still moves or hides text on a terminal or in a viewer:
// C1 controls, U+2028/U+2029, bidirectional embeddings, overrides, isolates.
bool IsHiddenControl(std::string_view seq) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(seq[k]); };
  if (seq.size() == 2) return byte(0) == 0xC2 && byte(1) <= 0x9F;
  if (seq.size() == 3 && byte(0) == 0xE2) {
    if (byte(1) == 0x80) return byte(2) >= 0xA8 && byte(2) <= 0xAE;  // U+2028-U+202E
    if (byte(1) == 0x81) return byte(2) >= 0xA6 && byte(2) <= 0xA9;  // U+2066-U+2069
  }
  return false;
}

// Appends `s` escaped for a text line; the common case (nothing to escape)
// is one scan and one copy.
void AppendEscaped(std::string_view s, spdlog::memory_buf_t& dest) {
  const bool plain = std::all_of(s.begin(), s.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return c >= 0x20 && c < 0x7f && c != '\\';
  });
  if (plain) {
    dest.append(s.data(), s.data() + s.size());
    return;
  }
  thread_local std::string escaped;
  escaped.clear();
  EscapeLogText(s, &escaped);
  dest.append(escaped.data(), escaped.data() + escaped.size());
}

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

// %* in a text pattern: the message, escaped (EscapeLogText).
class TextMessageFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    AppendEscaped(std::string_view(msg.payload.data(), msg.payload.size()), dest);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<TextMessageFlag>();
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
        AppendEscaped(value, dest);
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
    f->add_flag<TextMessageFlag>('*').set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %^%l%$ [%n] %*%F");
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

void EscapeLogText(std::string_view s, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  const auto hex = [&](unsigned char c) {
    const char code[4] = {'\\', 'x', kHex[c >> 4], kHex[c & 0xf]};
    out->append(code, sizeof(code));
  };
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const size_t n = Utf8SequenceAt(s, i);
      if (n == 0) {
        hex(c);  // not UTF-8: this byte alone; the next may start a sequence
        ++i;
        continue;
      }
      const std::string_view seq = s.substr(i, n);
      if (IsHiddenControl(seq)) {
        for (char b : seq) hex(static_cast<unsigned char>(b));
      } else {
        out->append(seq);
      }
      i += n;
      continue;
    }
    switch (c) {
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          hex(c);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
    ++i;
  }
}

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
