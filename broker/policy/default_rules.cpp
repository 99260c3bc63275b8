#include "broker/policy/default_rules.hpp"

namespace kiln::broker {
namespace {

const std::vector<std::string> kAll = {"python", "javascript", "shell"};
const std::vector<std::string> kPython = {"python"};
const std::vector<std::string> kJavascript = {"javascript"};
const std::vector<std::string> kShell = {"shell"};

std::vector<PolicyRule> Build() {
  constexpr auto kBlock = PolicyAction::kBlock;
  constexpr auto kWarn = PolicyAction::kWarn;
  // Destructive shell commands are matched in every language: Python and
  // JavaScript reach them through os.system / execSync strings.
  return {
      {"rm-root", kAll, R"(--no-preserve-root|\brm(\s[^\n;&|]*)?\s['"]?/\*?['"]?(\s|[;&|)]|$))",
       kBlock, "deletes the root filesystem"},
      {"fork-bomb", kShell,
       R"((\(\s*\)\s*|\bfunction\s+[\w:.]+\s*)\{\s*[\w:.]+\s*\|\s*[\w:.]+\s*&)", kBlock,
       "fork bomb: a function that pipes into itself in the background"},
      {"mkfs", kAll, R"(\b(mkfs(\.\w+)?|mke2fs|mkswap|wipefs)\b)", kBlock, "formats a filesystem"},
      {"raw-disk-write", kAll, R"((\bof=|>\s*)/dev/(sd|hd|vd|xvd|nvme|mmcblk|disk))", kBlock,
       "writes to a raw disk device"},
      {"pipe-to-shell", kAll,
       R"(\b(curl|wget)\b[^\n|]*\|\s*(sudo\s+)?((ba|da|z|k|fi)?sh|python[0-9.]*|perl|ruby|node)\b)"
       R"(|\b(ba|da|z|k)?sh\s+(-c\s+)?['"]?(<\(|\$\()\s*(curl|wget)\b)",
       kBlock, "runs a script downloaded from the network, which nobody could review"},
      {"exfiltrate-credentials", kAll,
       R"(\b(curl|wget|nc|ncat|netcat)\b[^\n]*(/etc/(shadow|passwd|sudoers)|\.ssh/id_)"
       R"(|/proc/self/environ|\.aws/credentials))",
       kBlock, "sends a credential or account file over the network"},
      {"reverse-shell", kAll,
       R"(\b(ba|da|z)?sh\s+-i\b[^\n]*/dev/(tcp|udp)/)"
       R"(|\b(nc|ncat|netcat)\b[^\n]*\s-[a-zA-Z]*[ec]\s*['"]?/bin/(ba|da|z)?sh\b)",
       kBlock, "connects an interactive shell to the network (reverse shell)"},
      {"python-ctypes", kPython,
       R"(^[ \t]*(from[ \t]+ctypes\b|import[ \t][^\n#]*\bctypes\b))"
       R"(|\b(__import__|import_module)\(\s*['"]ctypes\b)",
       kBlock, "ctypes gives raw memory and system call access, which ordinary code never needs"},
      {"python-rmtree-root", kPython, R"(\brmtree\(\s*[rbuRBU]?['"]/+['"])", kBlock,
       "deletes the root filesystem"},
      {"js-process-binding", kJavascript,
       R"(\bprocess\s*\.\s*(binding|_linkedBinding|dlopen)\b)"
       R"(|\bprocess\s*\[\s*['"](binding|_linkedBinding|dlopen)['"]\s*\])",
       kBlock, "reaches Node's internal bindings or loads native code"},

      {"python-os-command", kPython,
       R"(\bos\s*\.\s*(system|popen|exec[lv]p?e?|spawn[lv]p?e?|posix_spawnp?|fork|forkpty)\s*\()"
       R"(|\bpty\s*\.\s*spawn\s*\()",
       kWarn, "runs another program"},
      {"python-subprocess", kPython, R"(\bsubprocess\b)", kWarn, "starts other programs"},
      {"python-dynamic-code", kPython,
       R"((^|[^\w.])(eval|exec)\s*\(|\b__import__\s*\(|\bimportlib\s*\.\s*import_module\s*\()",
       kWarn, "runs code built at run time"},
      {"python-network", kPython,
       R"(^[ \t]*(import|from)[ \t]+(socket|requests|urllib\.request|urllib3|httpx|aiohttp)"
       R"(|http\.client|ftplib|smtplib|telnetlib|paramiko|websockets?)\b)",
       kWarn, "uses the network (off in the sandbox unless enabled)"},
      {"js-child-process", kJavascript, R"(\bchild_process\b)", kWarn, "starts other programs"},
      {"js-dynamic-code", kJavascript,
       R"((^|[^\w.$])eval\s*\(|\bnew\s+Function\s*\()"
       R"(|\brequire\s*\(\s*['"](node:)?vm['"]|\bfrom\s+['"](node:)?vm['"])",
       kWarn, "runs code built at run time"},
      {"js-network", kJavascript,
       R"((^|[^\w.$])fetch\s*\(|\bWebSocket\b)"
       R"(|\brequire\s*\(\s*['"](node:)?(net|dgram|tls|http|https|http2)['"])"
       R"(|\bfrom\s+['"](node:)?(net|dgram|tls|http|https|http2)['"])",
       kWarn, "uses the network (off in the sandbox unless enabled)"},
      {"shell-network", kShell,
       R"(\b(curl|wget|nc|ncat|netcat|socat|ssh|scp|telnet|ftp)\b|/dev/(tcp|udp)/)", kWarn,
       "uses the network (off in the sandbox unless enabled)"},
      {"shell-privilege", kShell, R"(\b(sudo|doas|nsenter|unshare|chroot|setcap)\b)", kWarn,
       "tries to change privileges or namespaces (refused in the sandbox)"},
  };
}

}  // namespace

const std::vector<PolicyRule>& DefaultPolicyRules() {
  static const std::vector<PolicyRule> kRules = Build();
  return kRules;
}

}  // namespace kiln::broker
