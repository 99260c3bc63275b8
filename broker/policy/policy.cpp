#include "broker/policy/policy.hpp"

#include <algorithm>

namespace kiln::broker {

common::Status PolicyVerdict::BlockStatus() const {
  if (!blocked) return common::Status::Ok();
  return {common::Code::kSecurityBlocked,
          "code blocked by policy rule '" + blocked->rule + "': " + blocked->message};
}

common::StatusOr<PolicyEngine> PolicyEngine::Create(const PolicyConfig& config) {
  PolicyEngine engine;
  ASSIGN_OR_RETURN(engine.rules_, EffectivePolicyRules(config));
  for (const std::string& language : PolicyLanguages()) {
    LanguageRules lr;
    std::vector<std::string> patterns;
    for (size_t i = 0; i < engine.rules_.size(); ++i) {
      const auto& langs = engine.rules_[i].languages;
      if (std::find(langs.begin(), langs.end(), language) == langs.end()) continue;
      patterns.push_back(engine.rules_[i].pattern);
      lr.rule_index.push_back(i);
    }
    auto set = PatternSet::Compile(patterns);
    if (!set.ok()) return set.status().WithContext("policy rules for " + language);
    lr.patterns = std::move(set).value();
    engine.by_language_.emplace(language, std::move(lr));
  }
  return engine;
}

PolicyVerdict PolicyEngine::Evaluate(std::string_view language, std::string_view code) const {
  PolicyVerdict v;
  auto it = by_language_.find(language);
  if (it == by_language_.end()) return v;
  const LanguageRules& lr = it->second;
  const std::vector<bool> hit = lr.patterns.Match(code);
  for (size_t i = 0; i < hit.size(); ++i) {
    if (!hit[i]) continue;
    const PolicyRule& rule = rules_[lr.rule_index[i]];
    if (rule.action == PolicyAction::kWarn) {
      v.warnings.push_back(rule.name);
    } else if (!v.blocked) {
      v.blocked = PolicyHit{
          rule.name, rule.message.empty() ? "matched policy rule " + rule.name : rule.message};
    }
  }
  return v;
}

}  // namespace kiln::broker
