#include "broker/policy/policy_config.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "broker/policy/default_rules.hpp"
#include "broker/policy/pattern_set.hpp"
#include "common/config/yaml_reader.hpp"

namespace kiln::broker {
namespace {

bool IsNameByte(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
}

}  // namespace

const std::vector<std::string>& PolicyLanguages() {
  static const std::vector<std::string> kLanguages = {"python", "javascript", "shell"};
  return kLanguages;
}

const char* PolicyActionName(PolicyAction a) {
  return a == PolicyAction::kBlock ? "block" : "warn";
}

common::Status ValidatePolicyRule(const PolicyRule& rule) {
  if (rule.name.empty() || rule.name.size() > 64 ||
      !std::all_of(rule.name.begin(), rule.name.end(), IsNameByte)) {
    return common::InvalidRequest("name: '" + rule.name +
                                  "' must be 1 to 64 characters of a-z, 0-9, '-', '_', '.'");
  }
  if (rule.languages.empty()) {
    return common::InvalidRequest("languages: at least one of python, javascript, shell");
  }
  const auto& known = PolicyLanguages();
  for (const auto& l : rule.languages) {
    if (std::find(known.begin(), known.end(), l) == known.end()) {
      return common::InvalidRequest("languages: unknown language '" + l +
                                    "' (expected python, javascript or shell)");
    }
  }
  common::Status st = PatternSet::Check(rule.pattern);
  if (!st.ok()) return st.WithContext("pattern");
  return common::Status::Ok();
}

common::StatusOr<std::vector<PolicyRule>> EffectivePolicyRules(const PolicyConfig& config) {
  std::map<std::string, size_t> configured;  // name -> index in config.rules
  for (size_t i = 0; i < config.rules.size(); ++i) {
    const PolicyRule& r = config.rules[i];
    const std::string where = "rules[" + std::to_string(i) + "]";
    RETURN_IF_ERROR(ValidatePolicyRule(r).WithContext(where));
    if (!configured.emplace(r.name, i).second) {
      return common::InvalidRequest(where + ".name: duplicate rule name '" + r.name + "'");
    }
  }
  if (!config.use_defaults && !config.disable.empty()) {
    return common::InvalidRequest("disable: only meaningful with use_defaults: true");
  }
  std::set<std::string> disabled;
  for (const auto& name : config.disable) {
    const auto& d = DefaultPolicyRules();
    if (std::none_of(d.begin(), d.end(), [&](const PolicyRule& r) { return r.name == name; })) {
      return common::InvalidRequest("disable: no built-in rule named '" + name + "'");
    }
    disabled.insert(name);
  }

  std::vector<PolicyRule> out;
  std::set<std::string> placed;
  if (config.use_defaults) {
    for (const PolicyRule& d : DefaultPolicyRules()) {
      if (disabled.count(d.name) != 0) continue;
      auto it = configured.find(d.name);
      out.push_back(it == configured.end() ? d : config.rules[it->second]);
      placed.insert(d.name);
    }
  }
  for (const PolicyRule& r : config.rules) {
    if (placed.count(r.name) == 0) out.push_back(r);
  }
  return out;
}

common::StatusOr<PolicyConfig> ParsePolicyConfig(const YAML::Node& node, const std::string& path) {
  PolicyConfig cfg;
  common::YamlReader top(node, path);
  top.Get("use_defaults", &cfg.use_defaults);
  top.Get("disable", &cfg.disable);
  YAML::Node rules = top.Sequence("rules");
  for (size_t i = 0; rules && i < rules.size(); ++i) {
    const std::string where = path + ".rules[" + std::to_string(i) + "]";
    if (!rules[i].IsMap()) return common::InvalidRequest(where + ": expected a mapping");
    common::YamlReader r(rules[i], where);
    PolicyRule rule;
    for (const char* required : {"name", "languages", "pattern", "action"}) {
      if (!r.Has(required)) return common::InvalidRequest(where + "." + required + ": required");
    }
    r.Get("name", &rule.name);
    r.Get("languages", &rule.languages);
    r.Get("pattern", &rule.pattern);
    std::string action = "warn";
    r.GetEnum("action", &action, {"block", "warn"});
    rule.action = action == "block" ? PolicyAction::kBlock : PolicyAction::kWarn;
    r.Get("message", &rule.message);
    RETURN_IF_ERROR(r.Finish());
    RETURN_IF_ERROR(ValidatePolicyRule(rule).WithContext(where));
    cfg.rules.push_back(std::move(rule));
  }
  RETURN_IF_ERROR(top.Finish());
  // Duplicates and unknown `disable` names, with the same messages the engine would give.
  auto effective = EffectivePolicyRules(cfg);
  if (!effective.ok()) return effective.status().WithContext(path);
  return cfg;
}

}  // namespace kiln::broker
