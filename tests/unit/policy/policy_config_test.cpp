#include "broker/policy/policy_config.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kiln::broker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

common::StatusOr<PolicyConfig> Parse(const std::string& yaml) {
  YAML::Node root = YAML::Load(yaml);
  return ParsePolicyConfig(root["policy"], "policy");
}

std::string ErrorOf(const std::string& yaml) {
  auto c = Parse(yaml);
  EXPECT_FALSE(c.ok()) << yaml;
  EXPECT_EQ(c.status().code(), common::Code::kInvalidRequest) << yaml;
  return c.status().message();
}

TEST(PolicyConfig, AbsentSectionMeansTheBuiltInRules) {
  auto c = Parse("other: 1\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->use_defaults);
  EXPECT_TRUE(c->rules.empty());
  EXPECT_TRUE(c->disable.empty());
}

TEST(PolicyConfig, ReadsEveryField) {
  auto c = Parse(R"(
policy:
  use_defaults: true
  disable: [python-ctypes, mkfs]
  rules:
    - name: no-pandas
      languages: [python]
      pattern: '\bpandas\b'
      action: block
      message: pandas is not installed here
    - {name: tar-warn, languages: [shell, python], pattern: '\btar\s', action: warn}
)");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_THAT(c->disable, ElementsAre("python-ctypes", "mkfs"));
  ASSERT_EQ(c->rules.size(), 2u);
  EXPECT_EQ(c->rules[0].name, "no-pandas");
  EXPECT_THAT(c->rules[0].languages, ElementsAre("python"));
  EXPECT_EQ(c->rules[0].pattern, R"(\bpandas\b)");
  EXPECT_EQ(c->rules[0].action, PolicyAction::kBlock);
  EXPECT_EQ(c->rules[0].message, "pandas is not installed here");
  EXPECT_EQ(c->rules[1].action, PolicyAction::kWarn);
  EXPECT_THAT(c->rules[1].languages, ElementsAre("shell", "python"));
  EXPECT_TRUE(c->rules[1].message.empty());

  auto off = Parse("policy: {use_defaults: false}\n");
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->use_defaults);
}

TEST(PolicyConfig, ErrorsNameTheKey) {
  const std::string rule = "{name: r, languages: [shell], pattern: x, action: warn";
  EXPECT_THAT(ErrorOf("policy: {colour: red}\n"), HasSubstr("policy.colour: unknown key"));
  EXPECT_THAT(ErrorOf("policy: {use_defaults: maybe}\n"),
              HasSubstr("policy.use_defaults: expected true or false"));
  EXPECT_THAT(ErrorOf("policy: {rules: {a: 1}}\n"), HasSubstr("policy.rules: expected a list"));
  EXPECT_THAT(ErrorOf("policy: {rules: [x]}\n"), HasSubstr("policy.rules[0]: expected a mapping"));
  EXPECT_THAT(ErrorOf("policy: {rules: [" + rule + ", patern: y}]}\n"),
              HasSubstr("policy.rules[0].patern: unknown key"));
  EXPECT_THAT(ErrorOf("policy: {rules: [{name: r, languages: [shell], action: warn}]}\n"),
              HasSubstr("policy.rules[0].pattern: required"));
  EXPECT_THAT(ErrorOf("policy: {rules: [{name: r, languages: [shell], pattern: x}]}\n"),
              HasSubstr("policy.rules[0].action: required"));
  EXPECT_THAT(
      ErrorOf("policy: {rules: [{name: r, languages: [shell], pattern: x, action: deny}]}\n"),
      HasSubstr("policy.rules[0].action: must be one of block, warn, got 'deny'"));
  EXPECT_THAT(
      ErrorOf("policy: {rules: [{name: r, languages: [ruby], pattern: x, action: warn}]}\n"),
      HasSubstr("policy.rules[0]: languages: unknown language 'ruby'"));
  EXPECT_THAT(ErrorOf("policy: {rules: [{name: r, languages: shell, pattern: x, action: warn}]}\n"),
              HasSubstr("policy.rules[0].languages: expected a list of strings"));
  EXPECT_THAT(ErrorOf("policy: {rules: [{name: r, languages: [], pattern: x, action: warn}]}\n"),
              HasSubstr("policy.rules[0]: languages: at least one"));
  EXPECT_THAT(
      ErrorOf(
          "policy: {rules: [{name: 'Bad Name', languages: [shell], pattern: x, action: warn}]}\n"),
      HasSubstr("policy.rules[0]: name: 'Bad Name'"));
  EXPECT_THAT(
      ErrorOf("policy: {rules: [{name: r, languages: [shell], pattern: '(x', action: warn}]}\n"),
      HasSubstr("policy.rules[0]: pattern: offset 2: missing )"));
  EXPECT_THAT(
      ErrorOf("policy: {rules: [{name: r, languages: [shell], pattern: 'x*', action: warn}]}\n"),
      HasSubstr("policy.rules[0]: pattern: can match an empty string"));
  EXPECT_THAT(ErrorOf("policy: {rules: [" + rule + "}, " + rule + "}]}\n"),
              HasSubstr("policy: rules[1].name: duplicate rule name 'r'"));
  EXPECT_THAT(ErrorOf("policy: {disable: [no-such-rule]}\n"),
              HasSubstr("policy: disable: no built-in rule named 'no-such-rule'"));
  EXPECT_THAT(ErrorOf("policy: {use_defaults: false, disable: [mkfs]}\n"),
              HasSubstr("disable: only meaningful with use_defaults: true"));
}

}  // namespace
}  // namespace kiln::broker
