// libFuzzer target for the JSON a client hands the broker: ParseJson
// (common/json/bounded_json.hpp) and the POST /v1/executions body
// (broker/service/submit_request.hpp, also the native Submit's request_json).
//
//   tests/fuzz/fuzz.sh build-fuzz 600 submit_fuzz   # build, then fuzz for 10 minutes
//
// Contracts checked on any bytes:
//  - ParseJson: a value it returns is within its limits (depth and count,
//    measured without recursion), dump()s without throwing and parses back
//    equal; under tighter limits it returns the same value or names the limit.
//  - ParseSubmitRequest with the default BrokerConfig: a refusal is a
//    described INVALID_REQUEST or LIMIT_EXCEEDED (always INVALID_REQUEST when
//    the text is not JSON); an accepted spec keeps every rule docs/api.md
//    states, survives the Redis record (ToJson, dump, ParseJson, FromJson)
//    unchanged, and its Execute frame is one the worker codec accepts.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "broker/config.hpp"
#include "broker/job/job.hpp"
#include "broker/service/submit_request.hpp"
#include "common/identifier.hpp"
#include "common/json/bounded_json.hpp"
#include "common/protocol/codec.hpp"
#include "common/relative_path.hpp"
#include "common/status.hpp"
#include "tests/fuzz/fuzz_targets.hpp"

namespace {

using kiln::common::Code;
using kiln::common::JsonLimits;
using kiln::common::ParseJson;
using kiln::common::Status;
using kiln::common::StatusOr;
using nlohmann::json;
namespace protocol = kiln::common::protocol;

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "submit_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

void Check(bool ok, const char* what, const std::string& detail = "") {
  if (!ok) Fail(what, detail);
}

// Container nesting (a scalar is 0, [] is 1) and number of values, as
// JsonLimits counts them, walked with an explicit stack: the value is not
// yet known to be shallow.
struct Shape {
  size_t depth = 0;
  size_t values = 0;
  bool has_object = false;  // then duplicate keys may have dropped values
};

Shape ShapeOf(const json& root) {
  Shape s;
  std::vector<std::pair<const json*, size_t>> stack = {{&root, 0}};
  while (!stack.empty()) {
    auto [v, outer] = stack.back();
    stack.pop_back();
    ++s.values;
    if (!v->is_structured()) continue;
    s.depth = std::max(s.depth, outer + 1);
    s.has_object = s.has_object || v->is_object();
    for (const json& child : *v) stack.emplace_back(&child, outer + 1);
  }
  return s;
}

std::string Dump(const json& j) {
  try {
    return j.dump();
  } catch (const json::exception& e) {
    Fail("a value ParseJson returned does not dump", e.what());
  }
}

// Checks ParseJson's contract; returns its default-limits result.
StatusOr<json> CheckParseJson(std::string_view text) {
  const JsonLimits limits;
  StatusOr<json> j = ParseJson(text, limits, "fuzz");
  if (!j.ok()) {
    Check(j.status().code() == Code::kInvalidRequest && !j.status().message().empty(),
          "ParseJson rejection is not a described INVALID_REQUEST", j.status().ToString());
    return j;
  }
  const Shape shape = ShapeOf(*j);
  Check(shape.depth <= limits.max_depth, "ParseJson returned a value past max_depth",
        std::to_string(shape.depth));
  Check(shape.values <= limits.max_values, "ParseJson returned a value past max_values",
        std::to_string(shape.values));

  const std::string text2 = Dump(*j);
  StatusOr<json> again = ParseJson(text2, limits, "fuzz");
  Check(again.ok(), "dump() of an accepted value does not parse", again.status().ToString());
  Check(*again == *j, "dump() + ParseJson changed the value", text2.substr(0, 200));
  Check(Dump(*again) == text2, "dump() is not stable", text2.substr(0, 200));

  // Tighter limits: the same value, or a refusal naming the limit.
  const JsonLimits tight{.max_depth = 4, .max_values = 64};
  StatusOr<json> small = ParseJson(text, tight, "fuzz");
  if (small.ok()) {
    const Shape s = ShapeOf(*small);
    Check(s.depth <= tight.max_depth && s.values <= tight.max_values,
          "ParseJson returned a value past tight limits");
    Check(*small == *j, "tight limits changed an accepted value");
  } else {
    const std::string& m = small.status().message();
    Check(m.find("nested deeper than 4 levels") != std::string::npos ||
              m.find("more than 64 values") != std::string::npos,
          "valid JSON refused under tight limits without naming one", m);
    // Only a duplicate key (the last one wins) can hide the excess from
    // the returned value: without objects, it must be visible.
    Check(shape.depth > tight.max_depth || shape.values > tight.max_values || shape.has_object,
          "a value within tight limits was refused", m);
  }
  return j;
}

bool IsSessionName(const std::string& s) {
  if (s.empty() || s.size() > 128) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
           c == ':';
  });
}

bool WithinMax(const protocol::Limits& l, const protocol::Limits& max) {
  return l.timeout_ms > 0 && l.timeout_ms <= max.timeout_ms && l.memory_mb >= 16 &&
         l.memory_mb <= max.memory_mb && l.cpu_ms > 0 && l.cpu_ms <= max.cpu_ms &&
         l.max_output_bytes > 0 && l.max_output_bytes <= max.max_output_bytes && l.max_pids > 0 &&
         l.max_pids <= max.max_pids;
}

// The rules of docs/api.md, "POST /v1/executions", on an accepted spec.
void CheckSpec(const kiln::broker::JobSpec& spec, const kiln::broker::BrokerConfig& config) {
  Check(spec.tenant == "tenant", "spec.tenant is not the caller's");
  Check(spec.language == "python" || spec.language == "javascript" || spec.language == "shell",
        "accepted an unknown language", spec.language);
  Check(spec.code.size() <= config.max_code_bytes, "accepted code above max_code_bytes");
  Check(spec.session_id.empty() || IsSessionName(spec.session_id), "accepted a bad session_id");
  Check(spec.conversation_id.empty() ||
            (IsSessionName(spec.conversation_id) && !spec.session_id.empty()),
        "accepted a bad conversation_id");
  Check(spec.priority <= 9, "accepted a priority above 9");
  Check(WithinMax(spec.limits, config.max_limits), "limits outside (0, max] or memory_mb < 16");
  Check(spec.input_json.size() <= config.max_input_bytes, "accepted input above max_input_bytes");
  if (!spec.input_json.empty()) {
    StatusOr<json> in = ParseJson(spec.input_json);
    Check(in.ok() && in->is_object(), "input_json is not a JSON object the worker can parse",
          in.ok() ? in->type_name() : in.status().ToString());
    for (const auto& [key, value] : in->items()) {
      Check(kiln::common::IsIdentifier(key), "input key is not an identifier", key);
    }
  }
  Check(spec.env.size() <= protocol::kMaxEnvEntries, "accepted too many env variables");
  for (const auto& [name, value] : spec.env) {
    Check(kiln::common::IsIdentifier(name), "env name is not an identifier", name);
    Check(value.find('\0') == std::string::npos, "env value has a NUL", name);
  }
  Check(spec.files.size() <= protocol::kMaxFiles, "accepted too many files");
  std::set<std::string> paths;
  uint64_t total = 0;
  for (const auto& f : spec.files) {
    Check(kiln::common::CheckRelativePath(f.path).ok(), "accepted a bad file path", f.path);
    Check(paths.insert(f.path).second, "accepted a duplicate file path", f.path);
    total += f.content.size();
  }
  Check(total <= config.max_files_bytes, "accepted files above max_files_bytes");
  Check(spec.collect.size() <= protocol::kMaxListEntries, "accepted too many collect patterns");
  for (const auto& c : spec.collect) {
    Check(kiln::common::CheckRelativePath(c).ok(), "accepted a bad collect pattern", c);
  }
}

// What the broker stores in Redis (schedule_store.cpp) and reads back
// (job_store.cpp), and what it sends the worker (dispatcher.cpp).
void CheckStoredAndSent(const kiln::broker::JobSpec& spec) {
  const json stored = spec.ToJson();
  const std::string text = stored.dump(-1, ' ', false, json::error_handler_t::replace);
  StatusOr<json> parsed = ParseJson(text);
  Check(parsed.ok(), "the stored spec does not parse", parsed.status().ToString());
  StatusOr<kiln::broker::JobSpec> loaded = kiln::broker::JobSpec::FromJson(*parsed);
  Check(loaded.ok(), "the stored spec does not load", loaded.status().ToString());
  Check(loaded->ToJson() == stored, "the stored spec changed on its way through Redis");

  const protocol::Message execute = spec.ToExecute();
  const std::string frame = protocol::Encode(execute);
  Check(frame.size() <= protocol::kMaxMessageBytes, "the Execute frame is above kMaxMessageBytes");
  StatusOr<protocol::Message> decoded = protocol::Decode(frame);
  Check(decoded.ok(), "the worker codec refuses the Execute of an accepted submit",
        decoded.status().ToString());
  Check(*decoded == execute, "the Execute frame changed the job");
}

}  // namespace

int kiln::fuzz::SubmitOneInput(const uint8_t* data, size_t size) {
  static const kiln::broker::BrokerConfig config;
  const std::string_view body(reinterpret_cast<const char*>(data), size);

  const StatusOr<json> j = CheckParseJson(body);

  StatusOr<kiln::broker::JobSpec> spec = kiln::broker::ParseSubmitRequest(body, "tenant", config);
  if (!spec.ok()) {
    const Status& st = spec.status();
    Check((st.code() == Code::kInvalidRequest || st.code() == Code::kLimitExceeded) &&
              !st.message().empty(),
          "submit rejection is not a described INVALID_REQUEST or LIMIT_EXCEEDED", st.ToString());
    Check(j.ok() || st.code() == Code::kInvalidRequest, "text that is not JSON is not a 400",
          st.ToString());
    return 0;
  }
  Check(j.ok(), "ParseSubmitRequest accepted what ParseJson refuses", j.status().ToString());
  CheckSpec(*spec, config);
  CheckStoredAndSent(*spec);
  return 0;
}

KILN_LIBFUZZER_ENTRY(kiln::fuzz::SubmitOneInput)
