// valijson reports a bad schema by calling abort() unless this is set; only
// this file includes it, so no other translation unit sees another definition.
#if defined(VALIJSON_USE_EXCEPTIONS) && !VALIJSON_USE_EXCEPTIONS
#error "tool_spec.cpp needs valijson's errors as exceptions"
#endif
#ifndef VALIJSON_USE_EXCEPTIONS
#define VALIJSON_USE_EXCEPTIONS 1
#endif

#include "broker/tools/tool_spec.hpp"

#include <algorithm>
#include <exception>
#include <functional>
#include <map>
#include <set>
#include <utility>
#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validation_results.hpp>
#include <valijson/validator.hpp>

#include "common/json/bounded_json.hpp"

namespace kiln::broker {
namespace {

using common::Code;
using common::InvalidRequest;
using common::Status;
using common::StatusOr;
using nlohmann::json;

// Below this many steps a failing call is validated again with valijson's
// error list to say where it fails; the list holds one entry (~250 bytes)
// per failed step, so a bigger failure is reported without the place.
constexpr uint64_t kExplainSteps = 20'000;
constexpr size_t kMaxShownBytes = 256;  // of a name, path or reason quoted in a message

Status LimitExceeded(std::string m) { return {Code::kLimitExceeded, std::move(m)}; }

uint64_t SatAdd(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }
uint64_t SatMul(uint64_t a, uint64_t b) {
  return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

// At most `max` bytes of s, not ending inside a UTF-8 sequence.
std::string Shown(std::string_view s, size_t max = kMaxShownBytes) {
  if (s.size() <= max) return std::string(s);
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return std::string(s.substr(0, n)) + "...";
}

// A string from anywhere, as a JSON string literal: quoted, escaped, valid UTF-8.
std::string Quoted(std::string_view s) { return common::DumpJson(json(Shown(s))); }

std::string PointerToken(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

// JSON values in v, stopping soon after `limit` (v is depth-bounded).
uint64_t CountValues(const json& v, uint64_t limit = UINT64_MAX) {
  uint64_t n = 1;
  if (v.is_structured()) {
    for (const json& e : v) {
      if (n > limit) break;
      n = SatAdd(n, CountValues(e, limit - std::min(limit, n)));
    }
  }
  return n;
}

size_t Depth(const json& v, size_t limit) {
  if (!v.is_structured() || limit == 0) return v.is_structured() ? 1 : 0;
  size_t deepest = 0;
  for (const json& e : v) deepest = std::max(deepest, Depth(e, limit - 1));
  return 1 + deepest;
}

// One subschema, as much of it as costing a validation needs.
struct Node {
  std::string pointer;                  // where it is in the document, a JSON pointer
  std::optional<std::string> ref_text;  // its $ref, when it has one
  int ref = -1;                         // the $ref's target; valijson then ignores the siblings
  bool is_bool = false;
  uint64_t own = 1;  // its own values: keywords, enum, const, required...
  bool unique_items = false;
  bool iterates_members = false;  // properties / additionalProperties look at each member
  std::map<std::string, int, std::less<>> properties;
  std::vector<std::pair<std::string, int>> dependencies;  // applied when the key is present
  std::vector<int> in_place;  // allOf, anyOf, oneOf, not, if, then, else: the same value
  std::vector<int> tuple_items;
  int items = -1;
  int additional_items = -1;
  int contains = -1;
  int additional_properties = -1;
  int property_names = -1;

  template <typename F>
  void ForEachApplied(F&& f) const {
    if (ref >= 0) return f(ref);
    for (const auto& [k, c] : properties) f(c);
    for (const auto& [k, c] : dependencies) f(c);
    for (int c : in_place) f(c);
    for (int c : tuple_items) f(c);
    for (int c : {items, additional_items, contains, additional_properties, property_names}) {
      if (c >= 0) f(c);
    }
  }
};

// Errors name the place in the schema ("/properties/q: ..."); the root is "".
Status Bad(const std::string& pointer, const std::string& why) {
  return InvalidRequest(pointer.empty() ? why : pointer + ": " + why);
}

// Walks a copy of the schema keyword by keyword (so a property named
// "pattern" is not the keyword), refuses what valijson cannot do safely,
// strips what it must not see, and records the subschemas and their $refs.
class GraphBuilder {
 public:
  explicit GraphBuilder(std::vector<Node>* nodes) : nodes_(*nodes) {}

  StatusOr<int> Walk(json& s, const std::string& at) {
    if (!s.is_object() && !s.is_boolean()) {
      return Bad(at, "a schema must be an object or a boolean");
    }
    const int id = static_cast<int>(nodes_.size());
    nodes_.emplace_back();
    nodes_[id].pointer = at;
    by_pointer_[at] = id;
    if (s.is_boolean()) {
      nodes_[id].is_bool = true;
      return id;
    }
    std::vector<std::string> strip;
    for (auto& [key, value] : s.items()) {
      const std::string here = at + "/" + PointerToken(key);
      if (key == "pattern" || key == "patternProperties") {
        return Bad(at, "'" + key +
                           "' is not supported (regular expressions from a request could "
                           "stall the broker; check patterns when answering the call)");
      }
      if (key == "format" || key == "id") {  // an annotation; a draft-4 scope change
        strip.push_back(key);
        continue;
      }
      nodes_[id].own += 1;
      if (key == "$ref") {
        if (!value.is_string()) return Bad(here, "expected a string");
        nodes_[id].ref_text = value.get<std::string>();
      } else if (key == "properties" || key == "dependencies" || key == "definitions" ||
                 key == "$defs") {
        if (!value.is_object()) return Bad(here, "expected an object");
        if (key == "properties") nodes_[id].iterates_members = true;
        for (auto& [member, sub] : value.items()) {
          if (key == "dependencies" && sub.is_array()) {  // property dependencies
            nodes_[id].own = SatAdd(nodes_[id].own, CountValues(sub));
            continue;
          }
          ASSIGN_OR_RETURN(const int c, Walk(sub, here + "/" + PointerToken(member)));
          if (key == "properties") {
            nodes_[id].properties.emplace(member, c);
          } else if (key == "dependencies") {
            nodes_[id].dependencies.emplace_back(member, c);
          }  // definitions: reached through $refs only
        }
      } else if (key == "allOf" || key == "anyOf" || key == "oneOf") {
        if (!value.is_array()) return Bad(here, "expected an array of schemas");
        for (size_t i = 0; i < value.size(); ++i) {
          ASSIGN_OR_RETURN(const int c, Walk(value[i], here + "/" + std::to_string(i)));
          nodes_[id].in_place.push_back(c);
        }
      } else if (key == "items" && value.is_array()) {
        for (size_t i = 0; i < value.size(); ++i) {
          ASSIGN_OR_RETURN(const int c, Walk(value[i], here + "/" + std::to_string(i)));
          nodes_[id].tuple_items.push_back(c);
        }
      } else if (key == "not" || key == "if" || key == "then" || key == "else") {
        ASSIGN_OR_RETURN(const int c, Walk(value, here));
        nodes_[id].in_place.push_back(c);
      } else if (int Node::*slot = SingleSlot(key)) {
        ASSIGN_OR_RETURN(const int c, Walk(value, here));
        nodes_[id].*slot = c;
        if (key == "additionalProperties") nodes_[id].iterates_members = true;
      } else if (key == "multipleOf") {
        // valijson divides integers with `%`: a divisor of 0, or of -1 with a
        // huge double cast to INT64_MIN, is SIGFPE. Draft 7 wants > 0; as a
        // double the division is remainder(), which cannot trap.
        if (!value.is_number() || !(value.get<double>() > 0)) {
          return Bad(here, "expected a number greater than 0");
        }
        value = value.get<double>();
      } else {
        if (key == "uniqueItems" && value == true) nodes_[id].unique_items = true;
        nodes_[id].own = SatAdd(nodes_[id].own, CountValues(value));
      }
    }
    for (const std::string& key : strip) s.erase(key);
    return id;
  }

  Status ResolveRefs() {
    for (Node& n : nodes_) {
      if (!n.ref_text) continue;
      const std::string at = n.pointer + "/$ref";
      std::string_view r = *n.ref_text;
      if (r.empty()) {  // valijson reads "" as the whole document: a loop at the root
        return Bad(at, "expected \"#\" or a plain JSON pointer \"#/...\", not \"\"");
      }
      if (r[0] != '#') {
        return Bad(at,
                   "only references inside the schema (\"#/...\") are allowed, not " + Quoted(r));
      }
      r.remove_prefix(1);
      if (!r.empty() && (r[0] != '/' || r.back() == '/' || r.find('%') != r.npos)) {
        return Bad(at,
                   "expected \"#\" or a plain JSON pointer \"#/...\", not " + Quoted(*n.ref_text));
      }
      // Tokens are matched as written: the walk's pointers escape ~ and / the
      // same way, so "~2" or "00" simply name nothing.
      auto it = by_pointer_.find(std::string(r));
      if (it == by_pointer_.end()) {
        return Bad(at, Quoted(*n.ref_text) + " does not name a schema in this document");
      }
      n.ref = it->second;
    }
    return Status::Ok();
  }

 private:
  // Where a keyword holding one schema applied to a member or item goes.
  static int Node::*SingleSlot(const std::string& key) {
    if (key == "items") return &Node::items;
    if (key == "additionalItems") return &Node::additional_items;
    if (key == "contains") return &Node::contains;
    if (key == "additionalProperties") return &Node::additional_properties;
    if (key == "propertyNames") return &Node::property_names;
    return nullptr;
  }

  std::vector<Node>& nodes_;
  std::map<std::string, int> by_pointer_;
};

}  // namespace

struct ToolSchemas::Compiled {
  json document;                 // what valijson parsed: format and id stripped
  std::vector<Node> nodes;       // [0] is the root
  std::vector<uint64_t> weight;  // values with $refs expanded, per node
  valijson::Schema schema;
};

namespace {

using Compiled = ToolSchemas::Compiled;

// Expanded weight and depth of every subschema reachable from the root
// (what valijson parses and applies), refusing recursion. The depth bound
// also bounds this recursion.
class Measure {
 public:
  explicit Measure(Compiled* c) : c_(*c), state_(c->nodes.size(), 0), height_(c->nodes.size(), 0) {
    c_.weight.assign(c_.nodes.size(), 0);
  }

  Status Run() {
    RETURN_IF_ERROR(Visit(0, 1));
    if (c_.weight[0] > kMaxToolSchemaWeight) {
      return LimitExceeded("more than " + std::to_string(kMaxToolSchemaWeight) +
                           " values once its $refs are expanded");
    }
    return Status::Ok();
  }

 private:
  Status Visit(int id, size_t level) {
    const Node& n = c_.nodes[id];
    if (state_[id] == 1) {
      return Bad(n.pointer, "a recursive $ref (a schema that contains itself) is not supported");
    }
    if (state_[id] == 2 ? level + height_[id] - 1 > kMaxToolSchemaRefDepth
                        : level > kMaxToolSchemaRefDepth) {
      return Bad(n.pointer, "subschemas nested deeper than " +
                                std::to_string(kMaxToolSchemaRefDepth) +
                                " levels ($refs followed)");
    }
    if (state_[id] == 2) return Status::Ok();
    state_[id] = 1;
    uint64_t weight = n.ref >= 0 ? 1 : n.own;
    size_t height = 0;
    Status status;
    n.ForEachApplied([&](int child) {
      if (!status.ok()) return;
      status = Visit(child, level + 1);
      weight = SatAdd(weight, c_.weight[child]);
      height = std::max(height, height_[child]);
    });
    RETURN_IF_ERROR(status);
    c_.weight[id] = weight;
    height_[id] = height + 1;
    state_[id] = 2;
    return Status::Ok();
  }

  Compiled& c_;
  std::vector<uint8_t> state_;  // 0 not seen, 1 on the path, 2 done
  std::vector<size_t> height_;
};

// Errors without the field; the caller adds "tools[i].parameters".
StatusOr<std::shared_ptr<const Compiled>> Compile(const json& parameters) {
  if (!parameters.is_object()) return InvalidRequest("expected a JSON Schema object");
  if (Depth(parameters, kMaxToolSchemaDepth + 1) > kMaxToolSchemaDepth) {
    return InvalidRequest("nested deeper than " + std::to_string(kMaxToolSchemaDepth) + " levels");
  }
  if (const size_t bytes = common::DumpJson(parameters).size(); bytes > kMaxToolSchemaBytes) {
    return LimitExceeded(std::to_string(bytes) + " bytes, above the maximum " +
                         std::to_string(kMaxToolSchemaBytes));
  }
  auto c = std::make_shared<Compiled>();
  c->document = parameters;
  GraphBuilder graph(&c->nodes);
  RETURN_IF_ERROR(graph.Walk(c->document, "").status());
  RETURN_IF_ERROR(graph.ResolveRefs());
  RETURN_IF_ERROR(Measure(c.get()).Run());
  try {
    // No fetch callback: a reference outside the document is an error.
    valijson::SchemaParser parser(valijson::SchemaParser::kDraft7);
    const valijson::adapters::NlohmannJsonAdapter adapter(c->document);
    parser.populateSchema(adapter, c->schema);
  } catch (const std::exception& e) {
    return InvalidRequest("not a valid schema: " + Shown(e.what()));
  }
  return std::shared_ptr<const Compiled>(std::move(c));
}

// Walks the arguments along the schema, counting an upper bound of what
// valijson will do, and stops past kMaxToolValidationSteps. The recursion
// follows the schema, so it is at most kMaxToolSchemaRefDepth deep.
class Cost {
 public:
  explicit Cost(const Compiled& c) : c_(c) {}

  bool Walk(int id, const json& v) {
    if (!v.is_structured()) return Take(c_.weight[id]);  // nothing descends into a scalar
    const Node& n = c_.nodes[id];
    if (n.ref >= 0) return Take(1) && Walk(n.ref, v);
    if (!Take(n.own)) return false;
    for (int c : n.in_place) {
      if (!Walk(c, v)) return false;
    }
    if (v.is_object()) {
      for (const auto& [key, c] : n.dependencies) {
        if (v.contains(key) && !Walk(c, v)) return false;
      }
      if (n.iterates_members && !Take(v.size())) return false;
      if (n.property_names >= 0 && !Take(SatMul(v.size(), c_.weight[n.property_names]))) {
        return false;
      }
      if (!n.iterates_members) return true;
      for (const auto& [key, value] : v.items()) {
        auto it = n.properties.find(key);
        const int c = it != n.properties.end() ? it->second : n.additional_properties;
        if (c >= 0 && !Walk(c, value)) return false;
      }
      return true;
    }
    const uint64_t size = v.size();
    if (n.unique_items && size > 1) {
      // Every pair is compared, each comparison at most as long as the
      // smaller item: sum over pairs of min(a, b) <= (size - 1) / 2 * all values.
      if (!Take(SatMul(size - 1, CountValues(v, kMaxToolValidationSteps)) / 2)) return false;
    }
    const bool tuple = !n.tuple_items.empty();
    if (n.items < 0 && !tuple && n.contains < 0) return true;
    if (!Take(size)) return false;
    for (size_t i = 0; i < size; ++i) {
      const int c =
          tuple ? (i < n.tuple_items.size() ? n.tuple_items[i] : n.additional_items) : n.items;
      if (c >= 0 && !Walk(c, v[i])) return false;
      if (n.contains >= 0 && !Walk(n.contains, v[i])) return false;
    }
    return true;
  }

  uint64_t steps() const { return steps_; }

 private:
  bool Take(uint64_t n) {
    steps_ = SatAdd(steps_, n);
    return steps_ <= kMaxToolValidationSteps;
  }

  const Compiled& c_;
  uint64_t steps_ = 0;
};

// valijson's context ("<root>", "[tags]", "[1]") as a JSON pointer ("/tags/1").
std::string ContextPointer(const std::vector<std::string>& context) {
  std::string out;
  for (size_t i = 1; i < context.size(); ++i) {
    std::string_view t = context[i];
    if (t.size() >= 2 && t.front() == '[' && t.back() == ']') t = t.substr(1, t.size() - 2);
    out += "/" + PointerToken(t);
  }
  return out;
}

Status CheckShape(const json& arguments) {
  if (!arguments.is_object()) return InvalidRequest("arguments must be a JSON object");
  if (const size_t bytes = common::DumpJson(arguments).size(); bytes > kMaxToolArgumentBytes) {
    return LimitExceeded("arguments are " + std::to_string(bytes) + " bytes, above the maximum " +
                         std::to_string(kMaxToolArgumentBytes));
  }
  return Status::Ok();
}

// After CheckShape.
Status CheckSchema(const Compiled* schema, std::string_view name, const json& arguments) {
  if (schema == nullptr) return Status::Ok();
  Cost cost(*schema);
  if (!cost.Walk(0, arguments)) {
    return LimitExceeded("arguments are too costly to check against the schema of " +
                         std::string(name) + " (over " + std::to_string(kMaxToolValidationSteps) +
                         " steps)");
  }
  try {
    const valijson::adapters::NlohmannJsonAdapter target(arguments);
    valijson::Validator validator;
    if (validator.validate(schema->schema, target, nullptr)) return Status::Ok();
    std::string why;
    valijson::ValidationResults results;
    valijson::ValidationResults::Error first;
    if (cost.steps() <= kExplainSteps &&
        !valijson::Validator().validate(schema->schema, target, &results) &&
        results.popError(first)) {
      const std::string at = ContextPointer(first.context);
      why = ": " + (at.empty() ? "" : Shown(at) + ": ") + Shown(first.description);
    }
    return InvalidRequest("arguments do not match the schema of " + std::string(name) + why);
  } catch (const std::exception& e) {
    return common::Internal("validating the arguments of " + std::string(name) + ": " +
                            Shown(e.what()));
  }
}

StatusOr<std::shared_ptr<const Compiled>> CompileStored(const ToolDecl& decl) {
  if (decl.parameters_json.empty()) return std::shared_ptr<const Compiled>();
  auto doc = common::ParseJson(decl.parameters_json, {.max_depth = kMaxToolSchemaDepth}, "schema");
  auto compiled = doc.ok() ? Compile(*doc) : doc.status();
  if (!compiled.ok()) {
    return common::Internal("the stored schema of " + Shown(decl.name) +
                            " is damaged: " + compiled.status().message());
  }
  return compiled;
}

}  // namespace

bool IsToolName(std::string_view name) {
  if (name.empty() || name.size() > kMaxToolNameBytes) return false;
  auto letter = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; };
  if (!letter(name[0])) return false;
  return std::all_of(name.begin() + 1, name.end(),
                     [&](char c) { return letter(c) || (c >= '0' && c <= '9') || c == '-'; });
}

StatusOr<std::vector<ToolDecl>> ParseToolDecls(const json& tools) {
  if (!tools.is_array()) return InvalidRequest("tools: expected an array of tool declarations");
  if (tools.empty()) return InvalidRequest("tools: expected 1-32 tools (omit the field for none)");
  if (tools.size() > kMaxTools) {
    return LimitExceeded("tools: " + std::to_string(tools.size()) + " tools, above the maximum " +
                         std::to_string(kMaxTools));
  }
  std::vector<ToolDecl> out;
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string field = "tools[" + std::to_string(i) + "]";
    const json& t = tools[i];
    if (!t.is_object()) return InvalidRequest(field + ": expected an object");
    for (const auto& [key, value] : t.items()) {
      if (key != "name" && key != "description" && key != "parameters") {
        return InvalidRequest(field + ": unknown field " + Quoted(key));
      }
    }
    ToolDecl decl;
    auto name = t.find("name");
    if (name == t.end() || !name->is_string()) {
      return InvalidRequest(field + ".name: required, a string");
    }
    decl.name = name->get<std::string>();
    if (!IsToolName(decl.name)) {
      return InvalidRequest(field + ".name: " + Quoted(decl.name) +
                            " is not a tool name (^[A-Za-z_][A-Za-z0-9_-]{0,63}$)");
    }
    if (auto [it, fresh] = seen.emplace(decl.name, i); !fresh) {
      return InvalidRequest(field + ".name: " + Quoted(decl.name) + " is already tools[" +
                            std::to_string(it->second) + "].name");
    }
    if (auto d = t.find("description"); d != t.end() && !d->is_null()) {
      if (!d->is_string()) return InvalidRequest(field + ".description: expected a string");
      decl.description = d->get<std::string>();
      if (decl.description.size() > kMaxToolDescriptionBytes) {
        return LimitExceeded(field + ".description: " + std::to_string(decl.description.size()) +
                             " bytes, above the maximum " +
                             std::to_string(kMaxToolDescriptionBytes));
      }
    }
    if (auto p = t.find("parameters"); p != t.end() && !p->is_null()) {
      auto compiled = Compile(*p);
      if (!compiled.ok()) return compiled.status().WithContext(field + ".parameters");
      decl.parameters_json = common::DumpJson(*p);
    }
    out.push_back(std::move(decl));
  }
  return out;
}

json ToolDeclsToJson(const std::vector<ToolDecl>& tools) {
  json out = json::array();
  for (const ToolDecl& t : tools) {
    json j = {{"name", t.name}};
    if (!t.description.empty()) j["description"] = t.description;
    if (!t.parameters_json.empty()) {
      // A text that does not parse is kept as a string: reading it back
      // fails, rather than the tool quietly accepting any arguments.
      auto p = common::ParseJson(t.parameters_json, {.max_depth = kMaxToolSchemaDepth});
      j["parameters"] = p.ok() ? std::move(*p) : json(t.parameters_json);
    }
    out.push_back(std::move(j));
  }
  return out;
}

StatusOr<std::vector<ToolDecl>> ToolDeclsFromJson(const json& stored) {
  auto tools = ParseToolDecls(stored);
  if (!tools.ok()) return common::Internal("stored tools are damaged: " + tools.status().message());
  return tools;
}

Status ValidateToolCall(const std::vector<ToolDecl>& tools, std::string_view name,
                        const json& arguments) {
  auto decl =
      std::find_if(tools.begin(), tools.end(), [&](const ToolDecl& t) { return t.name == name; });
  if (decl == tools.end()) return InvalidRequest("unknown tool " + Quoted(name));
  RETURN_IF_ERROR(CheckShape(arguments));
  ASSIGN_OR_RETURN(auto schema, CompileStored(*decl));
  return CheckSchema(schema.get(), decl->name, arguments);
}

StatusOr<ToolSchemas> ToolSchemas::Create(const std::vector<ToolDecl>& tools) {
  ToolSchemas out;
  for (const ToolDecl& t : tools) {
    ASSIGN_OR_RETURN(auto schema, CompileStored(t));
    out.tools_.push_back({t.name, std::move(schema)});
  }
  return out;
}

Status ToolSchemas::Validate(std::string_view name, const json& arguments) const {
  auto tool =
      std::find_if(tools_.begin(), tools_.end(), [&](const Tool& t) { return t.name == name; });
  if (tool == tools_.end()) return InvalidRequest("unknown tool " + Quoted(name));
  RETURN_IF_ERROR(CheckShape(arguments));
  return CheckSchema(tool->schema.get(), tool->name, arguments);
}

}  // namespace kiln::broker
