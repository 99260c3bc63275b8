// Tool declarations and the check of a call's arguments: the strict parse of
// `tools`, each refusal with its code and field, schemas that valijson would
// crash or stall on (recursive $refs, regular expressions, formats, costly
// arguments), and what one validation costs.
#include "broker/tools/tool_spec.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/json/bounded_json.hpp"

namespace kiln::broker {
namespace {

using common::Code;
using common::Status;
using nlohmann::json;

bool StartsWith(const std::string& s, std::string_view prefix) { return s.rfind(prefix, 0) == 0; }

// One tool "t" with `parameters`.
json OneTool(const json& parameters) {
  return json::array({{{"name", "t"}, {"parameters", parameters}}});
}

std::vector<ToolDecl> Decls(const json& tools) {
  auto d = ParseToolDecls(tools);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return d.ok() ? *d : std::vector<ToolDecl>{};
}

double MicrosPer(int n, const std::function<void()>& f) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) f();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
             .count() /
         n;
}

// A search tool as a model provider would declare it.
const json kSearchSchema = json::parse(R"({
  "type": "object",
  "properties": {
    "query": {"type": "string", "minLength": 1, "description": "what to look for"},
    "limit": {"type": "integer", "minimum": 1, "maximum": 50},
    "mode": {"enum": ["fast", "exact"]},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    "filter": {
      "type": "object",
      "properties": {"since": {"type": "string"}, "lang": {"type": "string"}},
      "required": ["lang"],
      "additionalProperties": false
    }
  },
  "required": ["query"],
  "additionalProperties": false
})");

TEST(ToolSpec, ToolNames) {
  for (const char* good : {"a", "_", "search", "get_user-2", "A9", "_x-"}) {
    EXPECT_TRUE(IsToolName(good)) << good;
  }
  EXPECT_TRUE(IsToolName(std::string(64, 'a')));
  EXPECT_FALSE(IsToolName(std::string(65, 'a')));
  for (const char* bad : {"", "1a", "-a", "a b", "a.b", "a/b", "é", "a\n", "a:b"}) {
    EXPECT_FALSE(IsToolName(bad)) << bad;
  }
}

TEST(ToolSpec, ValidDeclarationsAreKeptCompact) {
  auto d = ParseToolDecls(json::parse(R"([
    {"name": "search", "description": "Search the web", "parameters": {"type": "object",
       "properties": {"q": {"type": "string"}}}},
    {"name": "now"},
    {"name": "any_args", "description": null, "parameters": null},
    {"name": "empty", "parameters": {}}
  ])"));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_EQ(d->size(), 4u);
  EXPECT_EQ((*d)[0].name, "search");
  EXPECT_EQ((*d)[0].description, "Search the web");
  EXPECT_EQ((*d)[0].parameters_json, R"({"properties":{"q":{"type":"string"}},"type":"object"})");
  EXPECT_EQ((*d)[1], (ToolDecl{"now", "", ""}));
  EXPECT_EQ((*d)[2], (ToolDecl{"any_args", "", ""}));
  EXPECT_EQ((*d)[3].parameters_json, "{}");

  // 32 levels of JSON is the maximum schema depth, and survives the stored form.
  json deepest = json::object();                              // 1 level
  for (int i = 0; i < 28; ++i) deepest = {{"not", deepest}};  // 29, an even number of nots
  deepest = {{"items", {{"properties", {{"a", deepest}}}}}};  // 32
  auto stored = ToolDeclsFromJson(ToolDeclsToJson(Decls(OneTool(deepest))));
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_TRUE(ValidateToolCall(*stored, "t", json::object()).ok());
  EXPECT_EQ(ParseToolDecls(OneTool({{"not", deepest}})).status().message(),
            "tools[0].parameters: nested deeper than 32 levels");

  // 32 tools is the maximum, not over it.
  json many = json::array();
  for (size_t i = 0; i < kMaxTools; ++i) many.push_back({{"name", "t" + std::to_string(i)}});
  EXPECT_TRUE(ParseToolDecls(many).ok());
}

TEST(ToolSpec, SchemasAsModelProvidersWriteThem) {
  // Pydantic: $defs and $refs, anyOf with null for optional fields, titles,
  // a set as uniqueItems, format as an annotation, $schema and $id.
  const json pydantic = json::parse(R"({
    "$schema": "http://json-schema.org/draft-07/schema#",
    "$id": "https://example.com/booking.json",
    "title": "Booking",
    "type": "object",
    "$defs": {
      "Person": {"title": "Person", "type": "object",
                 "properties": {"name": {"type": "string"},
                                "email": {"type": "string", "format": "email"}},
                 "required": ["name"]},
      "Room": {"type": "object", "properties": {"number": {"type": "integer"}}}
    },
    "properties": {
      "guest": {"$ref": "#/$defs/Person"},
      "companions": {"type": "array", "items": {"$ref": "#/$defs/Person"}},
      "room": {"anyOf": [{"$ref": "#/$defs/Room"}, {"type": "null"}], "default": null},
      "features": {"type": "array", "items": {"type": "string"}, "uniqueItems": true},
      "when": {"type": "string", "format": "date-time"},
      "pattern": {"type": "string", "description": "a property named pattern is fine"},
      "format": {"enum": ["json", "text"]}
    },
    "required": ["guest"]
  })");
  auto tools = Decls(OneTool(pydantic));
  ASSERT_EQ(tools.size(), 1u);
  EXPECT_TRUE(ValidateToolCall(tools, "t", json::parse(R"({
    "guest": {"name": "Ada", "email": "not checked"},
    "companions": [{"name": "Bob"}], "room": null, "features": ["quiet", "view"],
    "when": "not a date: format is an annotation", "pattern": "x", "format": "json"
  })"))
                  .ok());
  EXPECT_TRUE(ValidateToolCall(tools, "t", json::parse(R"({"guest": {"name": "A"},
    "room": {"number": 12}})"))
                  .ok());
  Status s = ValidateToolCall(tools, "t", json::parse(R"({"guest": {"name": "A"},
    "companions": [{"name": "B"}, {"email": "c@x"}]})"));
  EXPECT_EQ(s.code(), Code::kInvalidRequest);
  EXPECT_EQ(s.message(),
            "arguments do not match the schema of t: /companions/1: Missing required property "
            "'name'.");
  s = ValidateToolCall(tools, "t", json::parse(R"({"guest": {"name": "A"},
    "features": ["a", "b", "a"]})"));
  EXPECT_TRUE(StartsWith(s.message(), "arguments do not match the schema of t: /features: "))
      << s.message();
  s = ValidateToolCall(tools, "t", json::parse(R"({"guest": {"name": "A"}, "format": "xml"})"));
  EXPECT_TRUE(StartsWith(s.message(), "arguments do not match the schema of t: /format: "))
      << s.message();
  s = ValidateToolCall(tools, "t", json::parse(R"({"guest": {"name": "A"}, "room": 3})"));
  EXPECT_TRUE(StartsWith(s.message(), "arguments do not match the schema of t: /room: "))
      << s.message();
}

struct Refusal {
  json tools;
  Code code;
  std::string prefix;
};

TEST(ToolSpec, EachRefusalNamesItsField) {
  json too_many = json::array();
  for (size_t i = 0; i <= kMaxTools; ++i) too_many.push_back({{"name", "t" + std::to_string(i)}});
  json big = {{"type", "object"}, {"description", std::string(kMaxToolSchemaBytes, 'x')}};
  json deep = json::object();
  for (int i = 0; i < 40; ++i) deep = {{"not", deep}};
  const std::vector<Refusal> cases = {
      {json::object(), Code::kInvalidRequest, "tools: expected an array"},
      {"search", Code::kInvalidRequest, "tools: expected an array"},
      {json::array(), Code::kInvalidRequest, "tools: expected 1-32 tools"},
      {too_many, Code::kLimitExceeded, "tools: 33 tools, above the maximum 32"},
      {json::array({"search"}), Code::kInvalidRequest, "tools[0]: expected an object"},
      {json::parse(R"([{"name": "a", "strict": true}])"), Code::kInvalidRequest,
       "tools[0]: unknown field \"strict\""},
      {json::parse(R"([{"description": "x"}])"), Code::kInvalidRequest,
       "tools[0].name: required, a string"},
      {json::parse(R"([{"name": 7}])"), Code::kInvalidRequest, "tools[0].name: required"},
      {json::parse(R"([{"name": "ok"}, {"name": "1st"}])"), Code::kInvalidRequest,
       "tools[1].name: \"1st\" is not a tool name"},
      {json::parse(R"([{"name": "a b"}])"), Code::kInvalidRequest, "tools[0].name: \"a b\" is not"},
      {json::array({{{"name", std::string(65, 'a')}}}), Code::kInvalidRequest, "tools[0].name: "},
      {json::parse(R"([{"name": "a"}, {"name": "b"}, {"name": "a"}])"), Code::kInvalidRequest,
       "tools[2].name: \"a\" is already tools[0].name"},
      {json::parse(R"([{"name": "a", "description": 3}])"), Code::kInvalidRequest,
       "tools[0].description: expected a string"},
      {json::array({{{"name", "a"}, {"description", std::string(2049, 'd')}}}),
       Code::kLimitExceeded, "tools[0].description: 2049 bytes, above the maximum 2048"},
      {OneTool(json::array()), Code::kInvalidRequest,
       "tools[0].parameters: expected a JSON Schema object"},
      {OneTool(true), Code::kInvalidRequest, "tools[0].parameters: expected a JSON Schema object"},
      {OneTool("{}"), Code::kInvalidRequest, "tools[0].parameters: expected a JSON Schema object"},
      {OneTool(big), Code::kLimitExceeded,
       "tools[0].parameters: 32802 bytes, above the maximum 32768"},
      {OneTool(deep), Code::kInvalidRequest, "tools[0].parameters: nested deeper than 32 levels"},
      // What valijson itself refuses, with its reason.
      {OneTool({{"type", 5}}), Code::kInvalidRequest, "tools[0].parameters: not a valid schema: "},
      {OneTool({{"required", "q"}}), Code::kInvalidRequest,
       "tools[0].parameters: not a valid schema: "},
      {OneTool({{"properties", {{"n", {{"minimum", "one"}}}}}}), Code::kInvalidRequest,
       "tools[0].parameters: not a valid schema: "},
      // valijson would divide by zero (SIGFPE) on the first.
      {OneTool({{"multipleOf", 0}}), Code::kInvalidRequest,
       "tools[0].parameters: /multipleOf: expected a number greater than 0"},
      {OneTool({{"properties", {{"n", {{"multipleOf", -1}}}}}}), Code::kInvalidRequest,
       "tools[0].parameters: /properties/n/multipleOf: expected a number greater than 0"},
      {OneTool({{"multipleOf", "2"}}), Code::kInvalidRequest,
       "tools[0].parameters: /multipleOf: expected a number greater than 0"},
      {OneTool({{"items", {1}}}), Code::kInvalidRequest,
       "tools[0].parameters: /items/0: a schema must be an object or a boolean"},
      {OneTool({{"properties", {{"a", "string"}}}}), Code::kInvalidRequest,
       "tools[0].parameters: /properties/a: a schema must be an object or a boolean"},
      {OneTool({{"properties", json::array()}}), Code::kInvalidRequest,
       "tools[0].parameters: /properties: expected an object"},
      {OneTool({{"anyOf", json::object()}}), Code::kInvalidRequest,
       "tools[0].parameters: /anyOf: expected an array of schemas"},
  };
  for (const Refusal& c : cases) {
    auto d = ParseToolDecls(c.tools);
    ASSERT_FALSE(d.ok()) << c.tools.dump().substr(0, 200);
    EXPECT_EQ(d.status().code(), c.code) << d.status().ToString();
    EXPECT_TRUE(StartsWith(d.status().message(), c.prefix))
        << d.status().message() << "\n  expected to start with: " << c.prefix;
  }
}

TEST(ToolSpec, ArgumentsAreCheckedAgainstTheSchema) {
  auto tools = Decls(
      json::array({{{"name", "search"}, {"parameters", kSearchSchema}}, {{"name", "anything"}}}));
  ASSERT_EQ(tools.size(), 2u);
  auto check = [&](const char* args) {
    return ValidateToolCall(tools, "search", json::parse(args));
  };
  EXPECT_TRUE(check(R"({"query": "kiln"})").ok());
  EXPECT_TRUE(check(R"({"query": "kiln", "limit": 5, "mode": "exact", "tags": ["a", "b"],
                        "filter": {"lang": "en", "since": "2024"}})")
                  .ok());
  const std::vector<std::pair<const char*, std::string>> bad = {
      {R"({})", "Missing required property 'query'."},
      {R"({"query": 3})", "/query: "},
      {R"({"query": ""})", "/query: "},
      {R"({"query": "k", "limit": 0})", "/limit: "},
      {R"({"query": "k", "limit": 2.5})", "/limit: "},
      {R"({"query": "k", "mode": "slow"})", "/mode: Failed to match against any enum values."},
      {R"({"query": "k", "tags": ["a", 2]})", "/tags/1: "},
      {R"({"query": "k", "tags": ["a", "b", "c", "d"]})", "/tags: "},
      {R"({"query": "k", "filter": {"since": "x"}})", "/filter: Missing required property 'lang'."},
      {R"({"query": "k", "filter": {"lang": "en", "x": 1}})", "/filter: "},
      {R"({"query": "k", "extra": true})", "Object contains a property that could not be"},
  };
  for (const auto& [args, why] : bad) {
    Status s = check(args);
    EXPECT_EQ(s.code(), Code::kInvalidRequest) << args;
    EXPECT_TRUE(StartsWith(s.message(), "arguments do not match the schema of search: " + why))
        << args << " -> " << s.message();
  }

  Status s = ValidateToolCall(tools, "nope", json::object());
  EXPECT_EQ(s, common::InvalidRequest("unknown tool \"nope\""));
  // The name comes from the sandbox: quoted and escaped in the message.
  s = ValidateToolCall(tools, "a\"\n\xff", json::object());
  EXPECT_EQ(s.message(), "unknown tool \"a\\\"\\n\xEF\xBF\xBD\"");
  for (const json& not_object : {json::array(), json("{}"), json(nullptr), json(1)}) {
    EXPECT_EQ(ValidateToolCall(tools, "search", not_object),
              common::InvalidRequest("arguments must be a JSON object"));
    EXPECT_EQ(ValidateToolCall(tools, "anything", not_object),
              common::InvalidRequest("arguments must be a JSON object"));
  }
  // No parameters: any object.
  EXPECT_TRUE(ValidateToolCall(tools, "anything", json::parse(R"({"a": [1, {"b": null}]})")).ok());

  // The size of the compact arguments, schema or none.
  json at_max = {{"query", std::string(kMaxToolArgumentBytes - 12, 'x')}};
  ASSERT_EQ(common::DumpJson(at_max).size(), kMaxToolArgumentBytes);
  EXPECT_TRUE(ValidateToolCall(tools, "search", at_max).ok());
  at_max["query"].get_ref<std::string&>() += "x";
  for (const char* name : {"search", "anything"}) {
    s = ValidateToolCall(tools, name, at_max);
    EXPECT_EQ(s.code(), Code::kLimitExceeded);
    EXPECT_EQ(s.message(), "arguments are 65537 bytes, above the maximum 65536");
  }
}

TEST(ToolSpec, MoreKeywords) {
  const json schema = json::parse(R"({
    "type": "object",
    "properties": {
      "point": {"type": "array", "items": [{"type": "number"}, {"type": "number"}],
                "additionalItems": false},
      "ids": {"type": "array", "contains": {"const": 0}},
      "kind": {"oneOf": [{"const": "a"}, {"const": "b"}]},
      "shape": {"type": "object",
                "if": {"properties": {"type": {"const": "circle"}}},
                "then": {"required": ["radius"]}, "else": {"required": ["side"]}},
      "labels": {"type": "object", "propertyNames": {"maxLength": 3},
                 "additionalProperties": {"type": "string"}},
      "card": {"type": "object", "dependencies": {"number": ["cvc"], "cvc": {"required": ["number"]}}},
      "not_null": {"not": {"type": "null"}},
      "nothing": false
    }
  })");
  auto tools = Decls(OneTool(schema));
  auto ok = [&](const char* a) { return ValidateToolCall(tools, "t", json::parse(a)).ok(); };
  EXPECT_TRUE(ok(R"({"point": [1, 2.5]})"));
  EXPECT_FALSE(ok(R"({"point": [1, 2, 3]})"));
  EXPECT_FALSE(ok(R"({"point": ["1", 2]})"));
  EXPECT_TRUE(ok(R"({"ids": [3, 0]})"));
  EXPECT_FALSE(ok(R"({"ids": [3, 1]})"));
  EXPECT_TRUE(ok(R"({"kind": "b"})"));
  EXPECT_FALSE(ok(R"({"kind": "c"})"));
  EXPECT_TRUE(ok(R"({"shape": {"type": "circle", "radius": 1}})"));
  EXPECT_FALSE(ok(R"({"shape": {"type": "circle", "side": 1}})"));
  EXPECT_TRUE(ok(R"({"shape": {"type": "square", "side": 1}})"));
  EXPECT_TRUE(ok(R"({"labels": {"abc": "x"}})"));
  EXPECT_FALSE(ok(R"({"labels": {"abcd": "x"}})"));
  EXPECT_FALSE(ok(R"({"labels": {"a": 1}})"));
  EXPECT_TRUE(ok(R"({"card": {"number": 1, "cvc": 2}})"));
  EXPECT_FALSE(ok(R"({"card": {"number": 1}})"));
  EXPECT_FALSE(ok(R"({"card": {"cvc": 1}})"));
  EXPECT_TRUE(ok(R"({"not_null": 0})"));
  EXPECT_FALSE(ok(R"({"not_null": null})"));
  EXPECT_FALSE(ok(R"({"nothing": 1})"));
}

TEST(ToolSpec, MultipleOfNeverTraps) {
  // An integer multipleOf is checked as a double: valijson's integer path
  // casts 1e300 to INT64_MIN and would take its remainder (SIGFPE for -1).
  auto tools = Decls(OneTool(
      json::parse(R"({"properties": {"n": {"multipleOf": 3}, "x": {"multipleOf": 0.5}}})")));
  auto ok = [&](const char* a) { return ValidateToolCall(tools, "t", json::parse(a)).ok(); };
  EXPECT_TRUE(ok(R"({"n": 9, "x": 1.5})"));
  EXPECT_TRUE(ok(R"({"n": -9, "x": 0})"));
  EXPECT_FALSE(ok(R"({"n": 10})"));
  EXPECT_FALSE(ok(R"({"x": 0.75})"));
  // Whatever a double's precision answers, the process is still here.
  for (const char* huge : {R"({"n": 1e300})", R"({"n": -1.7e308})", R"({"x": 1.7e308})",
                           R"({"n": 18446744073709551615})", R"({"n": -9223372036854775808})"}) {
    const Code code = ValidateToolCall(tools, "t", json::parse(huge)).code();
    EXPECT_TRUE(code == Code::kOk || code == Code::kInvalidRequest) << huge;
  }
  EXPECT_TRUE(StartsWith(ValidateToolCall(tools, "t", json::parse(R"({"n": 4})")).message(),
                         "arguments do not match the schema of t: /n: Value should be a multiple"));
}

TEST(ToolSpec, ReferencesStayInsideTheSchemaAndDoNotRecurse) {
  auto refusal = [](const json& schema) {
    auto d = ParseToolDecls(OneTool(schema));
    EXPECT_FALSE(d.ok()) << schema.dump();
    return d.ok() ? std::string() : d.status().message();
  };
  // Nothing is fetched: not absolute, relative or plain-name fragments.
  for (const char* ref : {"http://127.0.0.1/schema.json", "https://example.com/s#/a",
                          "other.json#/definitions/a", "file:///etc/passwd", "urn:x:y"}) {
    EXPECT_TRUE(StartsWith(refusal({{"properties", {{"x", {{"$ref", ref}}}}}}),
                           "tools[0].parameters: /properties/x/$ref: only references inside"))
        << ref;
  }
  EXPECT_TRUE(StartsWith(refusal({{"$ref", "#a"}}), "tools[0].parameters: /$ref: expected \"#\""));
  // An empty reference is the whole document to valijson: a loop it would
  // follow until the stack ran out (found by tool_fuzz).
  for (const json& schema : {json{{"$ref", ""}}, json{{"properties", {{"x", {{"$ref", ""}}}}}},
                             json{{"definitions", {{"a", {{"$ref", ""}}}}}}}) {
    EXPECT_NE(refusal(schema).find("$ref: expected \"#\""), std::string::npos) << schema;
  }
  EXPECT_TRUE(
      StartsWith(refusal({{"$ref", "#/definitions/a%20b"}}), "tools[0].parameters: /$ref: "));
  EXPECT_TRUE(StartsWith(refusal({{"$ref", 5}}), "tools[0].parameters: /$ref: expected a string"));
  // Only to a schema: not a map of schemas, not data, not nothing.
  for (const char* ref :
       {"#/definitions/missing", "#/properties", "#/enum/0", "#/definitions/a/"}) {
    EXPECT_TRUE(StartsWith(refusal({{"definitions", {{"a", {{"type", "string"}}}}},
                                    {"properties", {{"x", {{"type", "string"}}}}},
                                    {"enum", {{{"type", "string"}}}},
                                    {"$ref", ref}}),
                           "tools[0].parameters: /$ref: "))
        << ref;
  }
  // Recursion of any kind: valijson would overflow its stack on the first
  // three (the first two while parsing); the last would be safe in itself
  // but is refused too (two of them would cost 2^depth).
  for (const char* schema : {
           R"({"$ref": "#"})",
           R"({"definitions": {"a": {"$ref": "#/definitions/b"}, "b": {"$ref": "#/definitions/a"}},
               "$ref": "#/definitions/a"})",
           R"({"not": {"$ref": "#"}})",
           R"({"anyOf": [{"type": "string"}, {"allOf": [{"$ref": "#/anyOf/1"}]}]})",
           R"({"type": "object", "properties": {"child": {"$ref": "#"}}})",
       }) {
    EXPECT_NE(refusal(json::parse(schema)).find("a recursive $ref"), std::string::npos) << schema;
  }
  // A reference chain deeper than kMaxToolSchemaRefDepth.
  json chain = {{"definitions", json::object()}};
  for (int i = 0; i < 80; ++i) {
    chain["definitions"]["d" + std::to_string(i)] = {
        {"allOf", {{{"$ref", "#/definitions/d" + std::to_string(i + 1)}}}}};
  }
  chain["definitions"]["d80"] = {{"type", "object"}};
  chain["$ref"] = "#/definitions/d0";
  EXPECT_NE(refusal(chain).find("nested deeper than 64 levels"), std::string::npos);
  // A DAG of references that doubles at each step: 2^30 subschemas.
  json dag = {{"definitions", json::object()}};
  for (int i = 0; i < 30; ++i) {
    const std::string next = "#/definitions/d" + std::to_string(i + 1);
    dag["definitions"]["d" + std::to_string(i)] = {{"allOf", {{{"$ref", next}}, {{"$ref", next}}}}};
  }
  dag["definitions"]["d30"] = {{"type", "object"}};
  dag["$ref"] = "#/definitions/d0";
  auto d = ParseToolDecls(OneTool(dag));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Code::kLimitExceeded);
  EXPECT_EQ(d.status().message(),
            "tools[0].parameters: more than 65536 values once its $refs are expanded");
  // The same DAG, a few levels only, is fine: shared definitions are normal.
  dag["$ref"] = "#/definitions/d25";
  EXPECT_TRUE(ParseToolDecls(OneTool(dag)).ok());
  // $refs into properties, items and definitions of definitions work.
  auto tools = Decls(OneTool(json::parse(R"({
    "properties": {"a": {"type": "integer"}, "b": {"$ref": "#/properties/a"},
                   "c": {"items": {"$ref": "#/definitions/x/properties/y"}}},
    "definitions": {"x": {"properties": {"y": {"type": "string"}}}}
  })")));
  EXPECT_TRUE(ValidateToolCall(tools, "t", json::parse(R"({"b": 1, "c": ["s"]})")).ok());
  EXPECT_FALSE(ValidateToolCall(tools, "t", json::parse(R"({"b": "1"})")).ok());
  EXPECT_FALSE(ValidateToolCall(tools, "t", json::parse(R"({"c": [1]})")).ok());
}

TEST(ToolSpec, RegularExpressionsAreRefusedAndFormatsAreAnnotations) {
  // std::regex backtracks: (a|a)*b takes seconds on 24 bytes; ^a*$ on 64 KiB
  // overflows the stack. Refused wherever they are a keyword.
  for (const char* schema : {
           R"({"properties": {"q": {"type": "string", "pattern": "^(a|a)*b$"}}})",
           R"({"patternProperties": {"^x-": {"type": "string"}}})",
           R"({"definitions": {"d": {"pattern": "a"}}})",
           R"({"anyOf": [{"not": {"pattern": "a"}}]})",
       }) {
    auto d = ParseToolDecls(OneTool(json::parse(schema)));
    ASSERT_FALSE(d.ok()) << schema;
    EXPECT_EQ(d.status().code(), Code::kInvalidRequest);
    EXPECT_NE(d.status().message().find("is not supported (regular expressions"), std::string::npos)
        << d.status().message();
  }
  // valijson matches "date" with std::regex, recursing per byte: a 60 KB
  // string used to overflow the stack. format is stripped, so it passes.
  auto tools = Decls(OneTool(json::parse(
      R"({"properties": {"d": {"type": "string", "format": "date"},
                         "t": {"type": "string", "format": "date-time"}}})")));
  const std::string digits(60'000, '1');
  EXPECT_TRUE(ValidateToolCall(tools, "t", {{"d", digits + "-01-01"}}).ok());
  EXPECT_TRUE(ValidateToolCall(tools, "t", {{"t", digits}}).ok());
  EXPECT_TRUE(ValidateToolCall(tools, "t", {{"d", 5}}).code() == Code::kInvalidRequest);
  // The stored schema keeps its format (the client sees what it declared).
  EXPECT_NE(tools[0].parameters_json.find("\"format\":\"date\""), std::string::npos);
}

TEST(ToolSpec, CostlyArgumentsAreRefusedBeforeValijsonRuns) {
  auto timed = [](const std::vector<ToolDecl>& tools, const json& args, Status* out) {
    const auto start = std::chrono::steady_clock::now();
    *out = ValidateToolCall(tools, "t", args);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
  };
  Status s;
  // An enum of 6,000 values against 30,000 items: 1.8e8 comparisons (5 s).
  json values = json::array();
  for (int i = 0; i < 6000; ++i) values.push_back(i + 1);
  auto tools = Decls(OneTool({{"properties", {{"a", {{"items", {{"enum", values}}}}}}}}));
  json args = {{"a", json::array()}};
  for (int i = 0; i < 30'000; ++i) args["a"].push_back(0);
  double ms = timed(tools, args, &s);
  EXPECT_EQ(s.code(), Code::kLimitExceeded);
  EXPECT_TRUE(StartsWith(s.message(), "arguments are too costly to check against the schema of t"))
      << s.message();
  std::printf("[ cost ] enum 6000 x 30000 items: refused in %.2f ms\n", ms);
  // uniqueItems compares every pair: 20,000 items are 2e8 pairs (9 s).
  tools = Decls(OneTool({{"properties", {{"a", {{"uniqueItems", true}}}}}}));
  args = {{"a", json::array()}};
  for (int i = 0; i < 20'000; ++i) args["a"].push_back(i);
  ms = timed(tools, args, &s);
  EXPECT_EQ(s.code(), Code::kLimitExceeded);
  std::printf("[ cost ] uniqueItems 20000 items: refused in %.2f ms\n", ms);
  args["a"] = std::vector<int>(args["a"].begin(), args["a"].begin() + 1000);  // 5e5 pairs: fine
  ASSERT_EQ(args["a"].size(), 1000u);
  ms = timed(tools, args, &s);
  EXPECT_TRUE(s.ok()) << s.ToString();
  std::printf("[ cost ] uniqueItems 1000 items: valid in %.2f ms\n", ms);

  // The worst accepted call: many subschemas applied to many items, just
  // inside kMaxToolValidationSteps. This is what one call can cost.
  json all = json::array();
  for (int i = 0; i < 100; ++i) all.push_back({{"minimum", -1}});
  tools = Decls(OneTool({{"properties", {{"a", {{"items", {{"allOf", all}}}}}}}}));
  args = {{"a", json::array()}};
  for (int i = 0; i < 3'000; ++i) args["a"].push_back(0);
  ms = timed(tools, args, &s);
  EXPECT_TRUE(s.ok()) << s.ToString();
  std::printf("[ cost ] 100 subschemas x 3000 items (near the step budget): %.2f ms\n", ms);
  args["a"].push_back(0);
  args["a"].insert(args["a"].end(), 1'000, 0);
  EXPECT_EQ(ValidateToolCall(tools, "t", args).code(), Code::kLimitExceeded);
  // A large failure is refused without the place (the error list would be big).
  all[99] = {{"minimum", 1}};
  tools = Decls(OneTool({{"properties", {{"a", {{"items", {{"allOf", all}}}}}}}}));
  args["a"] = std::vector<int>(3'000, 0);
  ms = timed(tools, args, &s);
  EXPECT_EQ(s, common::InvalidRequest("arguments do not match the schema of t"));
  std::printf("[ cost ] the same, failing: %.2f ms\n", ms);
  args["a"] = {0, 1};
  EXPECT_TRUE(StartsWith(ValidateToolCall(tools, "t", args).message(),
                         "arguments do not match the schema of t: /a/0: "));
}

TEST(ToolSpec, DeclarationsRoundTripThroughTheirStoredForm) {
  auto tools = Decls(json::parse(R"([
    {"name": "search", "description": "Search", "parameters": {"type": "object",
       "properties": {"q": {"type": "string", "format": "uri"}}, "required": ["q"]}},
    {"name": "now"}
  ])"));
  json stored = ToolDeclsToJson(tools);
  EXPECT_EQ(stored, json::parse(R"([
    {"name": "search", "description": "Search", "parameters": {"type": "object",
       "properties": {"q": {"type": "string", "format": "uri"}}, "required": ["q"]}},
    {"name": "now"}
  ])"));
  // Through text, as Redis keeps it.
  auto reparsed = common::ParseJson(common::DumpJson(stored));
  ASSERT_TRUE(reparsed.ok());
  auto back = ToolDeclsFromJson(*reparsed);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, tools);

  // A damaged record is an internal error, never "any arguments".
  auto damaged = ToolDeclsFromJson(json::parse(R"([{"name": "a"}, {"name": "a"}])"));
  ASSERT_FALSE(damaged.ok());
  EXPECT_EQ(damaged.status().code(), Code::kInternal);
  EXPECT_TRUE(StartsWith(damaged.status().message(), "stored tools are damaged: tools[1].name"));
  std::vector<ToolDecl> broken = {{"a", "", "{not json"}};
  EXPECT_EQ(ToolDeclsToJson(broken)[0]["parameters"], "{not json");
  EXPECT_EQ(ToolDeclsFromJson(ToolDeclsToJson(broken)).status().code(), Code::kInternal);
  Status s = ValidateToolCall(broken, "a", json::object());
  EXPECT_EQ(s.code(), Code::kInternal);
  EXPECT_TRUE(StartsWith(s.message(), "the stored schema of a is damaged: ")) << s.message();
  EXPECT_EQ(ToolSchemas::Create(broken).status().code(), Code::kInternal);
}

TEST(ToolSpec, CompiledSchemasAnswerAsValidateToolCallAcrossThreads) {
  auto tools = Decls(
      json::array({{{"name", "search"}, {"parameters", kSearchSchema}}, {{"name", "anything"}}}));
  auto schemas = ToolSchemas::Create(tools);
  ASSERT_TRUE(schemas.ok()) << schemas.status().ToString();
  const std::vector<std::pair<std::string, json>> calls = {
      {"search", json::parse(R"({"query": "k", "limit": 3})")},
      {"search", json::parse(R"({"query": "k", "tags": ["a", 2]})")},
      {"search", json::array()},
      {"anything", json::parse(R"({"x": 1})")},
      {"other", json::object()},
  };
  for (const auto& [name, args] : calls) {
    EXPECT_EQ(schemas->Validate(name, args), ValidateToolCall(tools, name, args)) << name;
  }
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        for (const auto& [name, args] : calls) {
          if (schemas->Validate(name, args) != ValidateToolCall(tools, name, args)) ++mismatches;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(ToolSpec, WhatAValidationCosts) {
  auto tools = Decls(OneTool(kSearchSchema));
  auto schemas = ToolSchemas::Create(tools);
  ASSERT_TRUE(schemas.ok());
  const json args = json::parse(R"({"query": "kiln", "limit": 5, "tags": ["a"],
                                    "filter": {"lang": "en"}})");
  const double per_call = MicrosPer(2000, [&] { (void)ValidateToolCall(tools, "t", args); });
  const double compiled = MicrosPer(2000, [&] { (void)schemas->Validate("t", args); });
  std::printf(
      "[ cost ] small schema (%zu bytes): ValidateToolCall %.1f us (compiles), "
      "ToolSchemas::Validate %.1f us\n",
      tools[0].parameters_json.size(), per_call, compiled);
  // A schema near the size limit: 150 described properties.
  json big = {{"type", "object"}, {"properties", json::object()}};
  for (int i = 0; i < 150; ++i) {
    big["properties"]["field_" + std::to_string(i)] = {
        {"type", "string"}, {"maxLength", 100}, {"description", std::string(150, 'd')}};
  }
  auto big_tools = Decls(OneTool(big));
  ASSERT_EQ(big_tools.size(), 1u);
  const json few = {{"field_1", "x"}, {"field_99", "y"}};
  const double big_call = MicrosPer(50, [&] { (void)ValidateToolCall(big_tools, "t", few); });
  std::printf("[ cost ] large schema (%zu bytes): ValidateToolCall %.1f us\n",
              big_tools[0].parameters_json.size(), big_call);
  EXPECT_TRUE(ValidateToolCall(big_tools, "t", few).ok());
}

}  // namespace
}  // namespace kiln::broker
