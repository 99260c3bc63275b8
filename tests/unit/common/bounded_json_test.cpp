#include "common/json/bounded_json.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace kiln::common {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

std::string Nested(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(BoundedJson, ParsesWhatNlohmannParses) {
  const std::string text =
      R"({"a":[1,-2,3.5,true,false,null,"x\u00e9"],"b":{"c":{"d":[]}},"e":{},"a2":"y"})";
  auto j = ParseJson(text);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(*j, json::parse(text));
  EXPECT_EQ(ParseJson("7")->get<int>(), 7);
  EXPECT_EQ(*ParseJson("\"s\""), "s");
  // Duplicate keys: the last wins, as in nlohmann's own parser.
  EXPECT_EQ((*ParseJson(R"({"k":1,"k":2})"))["k"], 2);
}

TEST(BoundedJson, DepthAtTheLimitPassesOneMoreFails) {
  JsonLimits limits{.max_depth = 8};
  EXPECT_TRUE(ParseJson(Nested(8), limits).ok());
  auto deep = ParseJson(Nested(9), limits, "input");
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().code(), Code::kInvalidRequest);
  EXPECT_THAT(deep.status().message(), HasSubstr("input: nested deeper than 8 levels"));
  // Objects count as levels too.
  EXPECT_FALSE(ParseJson(R"({"a":{"b":{"c":[[[[[[1]]]]]]}}})", limits).ok());
}

TEST(BoundedJson, HundredsOfThousandsOfLevelsAreRefusedNotRecursedInto) {
  // The body that used to end the broker: dump() of this recursed per level.
  const std::string body = R"({"input":{"a":)" + Nested(300000) + "}}";
  auto j = ParseJson(body);
  ASSERT_FALSE(j.ok());
  EXPECT_THAT(j.status().message(), HasSubstr("nested deeper than 128 levels"));
}

TEST(BoundedJson, ValueCountIsBounded) {
  std::string many = "[";
  for (int i = 0; i < 1000; ++i) many += (i ? ",0" : "0");
  many += "]";
  EXPECT_TRUE(ParseJson(many, {.max_values = 1001}).ok());
  auto j = ParseJson(many, {.max_values = 1000});
  ASSERT_FALSE(j.ok());
  EXPECT_THAT(j.status().message(), HasSubstr("more than 1000 values"));
}

TEST(BoundedJson, MalformedTextNamesTheByte) {
  for (std::string_view bad : {"", "{", "[1,]", "{\"a\" 1}", "nul", "[1] x", "\"\xff\""}) {
    auto j = ParseJson(bad, {}, "request body");
    ASSERT_FALSE(j.ok()) << bad;
    EXPECT_EQ(j.status().code(), Code::kInvalidRequest);
    EXPECT_THAT(j.status().message(), HasSubstr("request body: not valid JSON at byte"));
  }
}

}  // namespace
}  // namespace kiln::common
