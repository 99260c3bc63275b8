#include "broker/scheduler/runtime_catalog.hpp"

#include <algorithm>
#include <set>
#include <string_view>

namespace kiln::broker {
namespace {

using nlohmann::json;

constexpr size_t kMaxNameBytes = 128;
constexpr size_t kMaxVersionBytes = 64;

bool Only(std::string_view s, size_t max, std::string_view extra) {
  if (s.empty() || s.size() > max) return false;
  for (char c : s) {
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum && extra.find(c) == std::string_view::npos) return false;
  }
  return true;
}

// npm scoped names (@scope/name) and python's normalized names.
bool IsPackageName(std::string_view s) { return Only(s, kMaxNameBytes, "._-@/+"); }
// PEP 440 and semver, plus bash's "5.2.15(1)-release".
bool IsVersion(std::string_view s) { return Only(s, kMaxVersionBytes, "._-+~:()!"); }

}  // namespace

RuntimeCatalog ParseRuntimeCatalog(const common::protocol::Register& reg) {
  RuntimeCatalog c;
  const std::set<std::string> offered(reg.runtimes.begin(), reg.runtimes.end());
  for (const auto& [language, version] : reg.runtime_versions) {
    if (offered.count(language) && IsVersion(version)) {
      c.versions[language] = version;
    } else {
      ++c.dropped;
    }
  }
  std::map<std::string, std::map<std::string, std::string>> seen;
  for (const std::string& entry : reg.packages) {
    const size_t a = entry.find(' ');
    const size_t b = a == std::string::npos ? a : entry.find(' ', a + 1);
    if (b == std::string::npos || entry.find(' ', b + 1) != std::string::npos) {
      ++c.dropped;
      continue;
    }
    std::string language = entry.substr(0, a), name = entry.substr(a + 1, b - a - 1),
                version = entry.substr(b + 1);
    if (!offered.count(language) || !IsPackageName(name) || !IsVersion(version) ||
        !seen[language].emplace(std::move(name), std::move(version)).second) {
      ++c.dropped;
    }
  }
  for (auto& [language, packages] : seen) {
    auto& list = c.packages[language];
    for (auto& [name, version] : packages) list.push_back({name, version});
  }
  return c;
}

json RuntimesJson(const std::vector<OfferedRuntimes>& workers) {
  struct Merge {
    size_t workers = 0;
    std::set<std::string> versions;
    std::map<std::string, std::pair<size_t, std::set<std::string>>> packages;
  };
  std::map<std::string, Merge> by_language;
  for (const auto& w : workers) {
    for (const std::string& language : *w.runtimes) {
      Merge& m = by_language[language];
      ++m.workers;
      if (w.catalog == nullptr) continue;
      if (auto v = w.catalog->versions.find(language); v != w.catalog->versions.end()) {
        m.versions.insert(v->second);
      }
      if (auto p = w.catalog->packages.find(language); p != w.catalog->packages.end()) {
        for (const auto& pkg : p->second) {
          auto& [count, versions] = m.packages[pkg.name];
          ++count;
          versions.insert(pkg.version);
        }
      }
    }
  }
  json out = json::array();
  for (const auto& [language, m] : by_language) {
    json full = json::array(), partial = json::array();
    for (const auto& [name, cv] : m.packages) {
      const auto& [count, versions] = cv;
      if (count == m.workers && versions.size() == 1) {
        full.push_back({{"name", name}, {"version", *versions.begin()}});
      } else {
        partial.push_back(
            {{"name", name},
             {"versions", json(std::vector<std::string>(versions.begin(), versions.end()))},
             {"workers", count}});
      }
    }
    out.push_back({{"language", language},
                   {"versions", std::vector<std::string>(m.versions.begin(), m.versions.end())},
                   {"workers", m.workers},
                   {"packages", std::move(full)},
                   {"partial", std::move(partial)}});
  }
  return {{"runtimes", std::move(out)}};
}

}  // namespace kiln::broker
