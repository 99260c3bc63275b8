// Tool declarations (docs/api.md, "Tool callbacks"): a submission's `tools`,
// parsed strictly, and the check of one call's arguments against the JSON
// Schema its tool declared, before the broker forwards the call to the client.
//
//   ASSIGN_OR_RETURN(spec.tools, ParseToolDecls(body["tools"]));       // submit
//   RETURN_IF_ERROR(ValidateToolCall(spec.tools, call.name, *args));  // each call
//
// Schemas are draft 7, checked with valijson. The schema (the tenant's) and
// the arguments (the tenant's code's) are both hostile, and valijson has
// corners that crash or stall the process, so a schema is accepted only if it
// stays clear of them:
// - `$ref` only to "#" or "#/..." naming a schema of the same document, and
//   valijson never gets a fetch callback: nothing is ever fetched. No
//   recursion through `$ref`: valijson overflows its stack on {"$ref": "#"}
//   while parsing and on {"not": {"$ref": "#"}} while validating; recursion
//   that descends into the arguments would be safe but can cost 2^depth
//   (allOf of two such refs), so none at all.
// - `pattern` and `patternProperties` are refused: valijson runs them with
//   std::regex, which backtracks (`(a|a)*b` takes seconds on 24 bytes) and
//   recurses once per input byte (`^a*$` on a 64 KiB string overflows the
//   stack). No bound on pattern or string length makes both safe (24 bytes
//   already stall); the client can check patterns itself when it answers.
// - `format` is kept but is only an annotation (draft 7 allows that): valijson
//   matches date formats with std::regex and overflows the stack on a 30 KB
//   string, so the copy it compiles has no `format`.
// - `multipleOf` must be > 0 and is compiled as a double: valijson's integer
//   path traps (SIGFPE) on 0, and on -1 with 1e300 as the argument.
// - At most kMaxToolSchemaDepth levels of JSON, kMaxToolSchemaRefDepth levels
//   of subschemas with $refs followed (valijson recurses per level) and
//   kMaxToolSchemaWeight values with $refs expanded (no exponential DAGs).
// Each call is costed before valijson runs: a walk of the arguments along the
// schema counts an upper bound of valijson's steps (subschemas applied, enum
// values compared, uniqueItems pairs) and refuses the call past
// kMaxToolValidationSteps, so one call costs at most some tens of ms.
//
// Arguments must come from common::ParseJson (bounded depth): validation and
// dump() recurse once per level of them.
// Pure functions on plain data, no I/O: any thread. ValidateToolCall compiles
// the tool's schema on each call: ~70 µs for a small schema, ~1.6 ms for a
// 32 KiB one, against ~3 µs once compiled (tool_spec_test prints the
// figures); ToolSchemas keeps compiled schemas for a caller that checks many
// calls of one job.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/protocol/messages.hpp"
#include "common/status.hpp"

namespace kiln::broker {

// The limits of docs/api.md (also GET /v1/capabilities `limits.tools`); the
// ones the worker enforces too come from the protocol.
inline constexpr size_t kMaxTools = common::protocol::kMaxTools;
inline constexpr size_t kMaxToolCalls = common::protocol::kMaxToolCalls;  // per execution
inline constexpr size_t kMaxToolsInFlight = common::protocol::kMaxToolCallsWaiting;
inline constexpr size_t kMaxToolNameBytes = common::protocol::kMaxToolNameBytes;
inline constexpr size_t kMaxToolArgumentBytes = common::protocol::kMaxToolArgumentBytes;
inline constexpr size_t kMaxToolResultBytes = common::protocol::kMaxToolResultBytes;
inline constexpr size_t kMaxToolErrorBytes = common::protocol::kMaxToolErrorBytes;
inline constexpr size_t kMaxToolSchemaBytes = 32768;  // compact JSON of `parameters`
inline constexpr size_t kMaxToolDescriptionBytes = 2048;
inline constexpr uint64_t kDefaultToolTimeoutMs = 30'000;
inline constexpr uint64_t kMaxToolTimeoutMs = common::protocol::kMaxToolTimeoutMs;
static_assert(kMaxTools == 32 && kMaxToolNameBytes == 64 && kMaxToolArgumentBytes == 65536 &&
              kMaxToolResultBytes == (1u << 20) && kMaxToolErrorBytes == 4096 &&
              kMaxToolTimeoutMs == 300'000);

// Hostile-schema bounds (above); not in the API's limits, named in refusals.
inline constexpr size_t kMaxToolSchemaDepth = 32;      // JSON levels, the object itself is 1
inline constexpr size_t kMaxToolSchemaRefDepth = 64;   // subschema levels, $refs followed
inline constexpr size_t kMaxToolSchemaWeight = 65536;  // values, $refs expanded
// A step is some 20-60 ns of valijson: the costliest accepted call takes ~20-50 ms.
inline constexpr uint64_t kMaxToolValidationSteps = 1'000'000;

// ^[A-Za-z_][A-Za-z0-9_-]{0,63}$
bool IsToolName(std::string_view name);

struct ToolDecl {
  std::string name;
  std::string description;      // "" when none
  std::string parameters_json;  // the schema as compact JSON; "" = any object
  friend bool operator==(const ToolDecl&, const ToolDecl&) = default;
};

// A submission's `tools`: 1-kMaxTools objects of name, description?,
// parameters? (null = absent). INVALID_REQUEST, or LIMIT_EXCEEDED for too
// many tools or bytes, with a message starting with the field ("tools[2].name:
// ...", "tools[0].parameters: /properties/q: ...").
common::StatusOr<std::vector<ToolDecl>> ParseToolDecls(const nlohmann::json& tools);

// What the broker stores with the job: the submission's shape (parameters an
// object again), so reading it back is ParseToolDecls, every check included.
nlohmann::json ToolDeclsToJson(const std::vector<ToolDecl>& tools);
// INTERNAL ("stored tools are damaged: ...") when the stored form no longer
// passes ParseToolDecls.
common::StatusOr<std::vector<ToolDecl>> ToolDeclsFromJson(const nlohmann::json& stored);

// One call: OK, or INVALID_REQUEST `unknown tool "NAME"` / "arguments must be
// a JSON object" / `arguments do not match the schema of NAME: /a/0: <why>`,
// or LIMIT_EXCEEDED for arguments above kMaxToolArgumentBytes (compact) or
// too costly to check (kMaxToolValidationSteps). INTERNAL if a stored schema
// no longer compiles. Compiles the tool's schema each time (see above).
common::Status ValidateToolCall(const std::vector<ToolDecl>& tools, std::string_view name,
                                const nlohmann::json& arguments);

// The schemas of one job's tools, compiled once. Immutable once created:
// Validate() may run on any number of threads at once.
//
//   ASSIGN_OR_RETURN(ToolSchemas schemas, ToolSchemas::Create(job.tools));
//   RETURN_IF_ERROR(schemas.Validate(call.name, *args));   // as ValidateToolCall
class ToolSchemas {
 public:
  // INTERNAL when a stored schema no longer compiles.
  static common::StatusOr<ToolSchemas> Create(const std::vector<ToolDecl>& tools);
  common::Status Validate(std::string_view name, const nlohmann::json& arguments) const;

  struct Compiled;  // a schema: its cost graph and its valijson::Schema

 private:
  struct Tool {
    std::string name;
    std::shared_ptr<const Compiled> schema;  // null: any object
  };
  std::vector<Tool> tools_;
};

}  // namespace kiln::broker
