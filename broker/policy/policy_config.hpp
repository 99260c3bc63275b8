// PolicyConfig: the policy rules a broker applies to submitted code, as read
// from the `policy:` section of its YAML config (docs/policy.md).
//
//   ASSIGN_OR_RETURN(PolicyConfig cfg, ParsePolicyConfig(root["policy"], "policy"));
//   ASSIGN_OR_RETURN(PolicyEngine engine, PolicyEngine::Create(cfg));
//
//   policy:
//     use_defaults: true          # the built-in rules (DefaultPolicyRules), default true
//     disable: [python-ctypes]    # built-in rules to drop, by name
//     rules:                      # added; a rule named like a built-in one replaces it
//       - {name: no-pandas, languages: [python], pattern: '\bpandas\b', action: warn,
//          message: "pandas is not installed"}
//
// Parsing is strict (unknown keys, bad values, bad patterns: an error naming the
// key). Plain data; any thread.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "common/status.hpp"

namespace kiln::broker {

enum class PolicyAction { kBlock, kWarn };

struct PolicyRule {
  std::string name;                    // [a-z0-9._-]+, unique; shown in records, errors and metrics
  std::vector<std::string> languages;  // python, javascript, shell
  std::string pattern;                 // pattern_syntax.hpp (an ECMAScript regex subset)
  PolicyAction action = PolicyAction::kWarn;
  std::string message;  // why the rule exists, for the client
};

struct PolicyConfig {
  bool use_defaults = true;
  std::vector<std::string> disable;  // names of built-in rules to drop
  std::vector<PolicyRule> rules;
};

// The languages a rule may name.
const std::vector<std::string>& PolicyLanguages();
const char* PolicyActionName(PolicyAction a);

// Checks one rule (name, languages, action, pattern); errors name the field
// ("name: ...", "pattern: offset 3: ...") for the caller to prefix.
common::Status ValidatePolicyRule(const PolicyRule& rule);

// The rules an engine built from `config` applies, in order: the built-in ones
// (unless use_defaults is false) minus `disable`, each replaced by a configured
// rule of the same name, then the other configured rules. Errors: a bad rule,
// a duplicate name, an unknown name in `disable`.
common::StatusOr<std::vector<PolicyRule>> EffectivePolicyRules(const PolicyConfig& config);

// `node` is the `policy` mapping (absent or null: the defaults); `path` prefixes
// error messages, e.g. "policy.rules[2].pattern: offset 3: missing )".
common::StatusOr<PolicyConfig> ParsePolicyConfig(const YAML::Node& node,
                                                 const std::string& path = "policy");

}  // namespace kiln::broker
