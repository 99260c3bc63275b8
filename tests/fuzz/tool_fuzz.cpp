// libFuzzer target for tool declarations and calls (broker/tools/tool_spec.hpp):
// a tenant's JSON Schema and its code's arguments are both hostile, and the
// validator behind them (valijson) crashes, loops or backtracks on schemas
// that ParseToolDecls must refuse.
//
//   tests/fuzz/fuzz.sh build-fuzz 600 tool_fuzz   # build, then fuzz for 10 minutes
//
// The input is "<schema JSON>\n<arguments JSON>". Contracts checked:
//  - ParseToolDecls on [{"name": "t", "parameters": <schema>}] refuses with a
//    described INVALID_REQUEST or LIMIT_EXCEEDED, or accepts a declaration
//    that survives storage (ToolDeclsToJson, ToolDeclsFromJson) unchanged;
//  - for an accepted one, ValidateToolCall and a compiled ToolSchemas agree
//    on the arguments, and refuse only with INVALID_REQUEST or
//    LIMIT_EXCEEDED (never INTERNAL, never a crash or a hang: libFuzzer's
//    -timeout catches the last).
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "broker/tools/tool_spec.hpp"
#include "common/json/bounded_json.hpp"
#include "common/status.hpp"
#include "tests/fuzz/fuzz_targets.hpp"

namespace {

using kiln::common::Code;
using kiln::common::Status;
using nlohmann::json;

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "tool_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

void CheckRefusal(const Status& st, const char* what) {
  if (st.ok()) return;
  if ((st.code() != Code::kInvalidRequest && st.code() != Code::kLimitExceeded) ||
      st.message().empty()) {
    Fail(what, st.ToString());
  }
}

}  // namespace

int kiln::fuzz::ToolOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nl = input.find('\n');
  const std::string_view schema_text = input.substr(0, nl);
  const std::string_view args_text = nl == std::string_view::npos ? "{}" : input.substr(nl + 1);
  // As the broker gets them: the submit body and a call's arguments, each
  // through the bounded parser first.
  auto schema = kiln::common::ParseJson(schema_text, {.max_depth = 128});
  if (!schema.ok()) return 0;
  json tools = json::array({json{{"name", "t"}, {"parameters", *schema}}});
  auto decls = kiln::broker::ParseToolDecls(tools);
  if (!decls.ok()) {
    CheckRefusal(decls.status(), "a declaration refused without a described 400");
    return 0;
  }
  auto stored = kiln::broker::ToolDeclsFromJson(
      json::parse(kiln::common::DumpJson(kiln::broker::ToolDeclsToJson(*decls))));
  if (!stored.ok() || *stored != *decls) {
    Fail("an accepted declaration does not survive storage",
         stored.ok() ? "changed" : stored.status().ToString());
  }
  auto args = kiln::common::ParseJson(args_text, {.max_depth = 64, .max_values = 1u << 16});
  if (!args.ok()) return 0;
  const Status once = kiln::broker::ValidateToolCall(*decls, "t", *args);
  CheckRefusal(once, "a call refused without a described 400");
  auto schemas = kiln::broker::ToolSchemas::Create(*decls);
  if (!schemas.ok()) Fail("an accepted declaration does not compile", schemas.status().ToString());
  const Status compiled = schemas->Validate("t", *args);
  if (compiled.ok() != once.ok() || compiled.code() != once.code()) {
    Fail("ToolSchemas and ValidateToolCall disagree",
         once.ToString() + " / " + compiled.ToString());
  }
  return 0;
}

KILN_LIBFUZZER_ENTRY(kiln::fuzz::ToolOneInput)
