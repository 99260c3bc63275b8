#include "common/package_spec.hpp"

#include <algorithm>
#include <cctype>
#include <map>

#include "common/protocol/messages.hpp"

namespace kiln::common {
namespace {

constexpr size_t kMaxPythonName = 100;
constexpr size_t kMaxNpmName = 214;  // npm's own limit
constexpr size_t kMaxVersion = 64;

bool IsAlnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

// PEP 508: letters, digits, `.`, `_`, `-`, starting and ending alphanumeric.
bool IsPythonName(std::string_view s) {
  if (s.empty() || s.size() > kMaxPythonName || !IsAlnum(s.front()) || !IsAlnum(s.back())) {
    return false;
  }
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return IsAlnum(c) || c == '.' || c == '_' || c == '-'; });
}

// PEP 503: lowercase, every run of `.`, `_`, `-` one `-`.
std::string NormalizePython(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '.' || c == '_' || c == '-') {
      if (out.empty() || out.back() != '-') out += '-';
    } else {
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
  }
  return out;
}

// One part of an npm name: lowercase letters, digits, `-`, `.`, `_`, `~`,
// not starting with `.` or `_` (npm's rule) or `-` (an installer option).
bool IsNpmPart(std::string_view s) {
  if (s.empty() || s.front() == '.' || s.front() == '_' || s.front() == '-') return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
           c == '~';
  });
}

bool IsNpmName(std::string_view s) {
  if (s.empty() || s.size() > kMaxNpmName) return false;
  if (s.front() != '@') return IsNpmPart(s);
  size_t slash = s.find('/');
  return slash != std::string_view::npos && IsNpmPart(s.substr(1, slash - 1)) &&
         IsNpmPart(s.substr(slash + 1));
}

// A pinned version or (npm) a dist-tag: starts alphanumeric, then
// alphanumerics and `.+-_!` (PEP 440 epochs and local versions, semver
// pre-releases and builds). No ranges: `<`, `>`, `^`, `~`, `*`, spaces.
bool IsVersion(std::string_view s) {
  if (s.empty() || s.size() > kMaxVersion || !IsAlnum(s.front())) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return IsAlnum(c) || c == '.' || c == '+' || c == '-' || c == '_' || c == '!';
  });
}

Status Bad(std::string_view spec, std::string_view why) {
  std::string shown(spec.substr(0, 80));
  for (char& c : shown) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return InvalidRequest("'" + shown + "': " + std::string(why));
}

}  // namespace

bool TakesPackages(std::string_view language) {
  return language == "python" || language == "javascript";
}

StatusOr<PackageSpec> ParsePackageSpec(std::string_view language, std::string_view spec) {
  PackageSpec out;
  if (language == "python") {
    size_t eq = spec.find("==");
    std::string_view name = spec.substr(0, eq);
    if (!IsPythonName(name)) {
      return Bad(spec,
                 "expected a package name (letters, digits, '.', '_', '-'), "
                 "optionally '==version'");
    }
    if (eq != std::string_view::npos) {
      std::string_view version = spec.substr(eq + 2);
      if (!IsVersion(version)) return Bad(spec, "expected one exact version after '=='");
      out.version = version;
    }
    out.name = name;
    out.key = NormalizePython(name);
    return out;
  }
  if (language == "javascript") {
    size_t at = spec.find('@', 1);  // a leading '@' starts a scope
    std::string_view name = spec.substr(0, at);
    if (!IsNpmName(name)) {
      return Bad(spec,
                 "expected an npm package name (lowercase letters, digits, '-', '.', "
                 "'_', '~'; '@scope/name'), optionally '@version'");
    }
    if (at != std::string_view::npos) {
      std::string_view version = spec.substr(at + 1);
      if (!IsVersion(version)) return Bad(spec, "expected one exact version or tag after '@'");
      out.version = version;
    }
    out.name = name;
    out.key = out.name;
    return out;
  }
  return InvalidRequest(std::string(language) + " jobs take no packages");
}

Status ValidatePackageSpecs(std::string_view language, const std::vector<std::string>& specs) {
  if (specs.empty()) return Status::Ok();
  if (!TakesPackages(language)) {
    return InvalidRequest("packages: " + std::string(language) +
                          " jobs take no packages (python and javascript do)");
  }
  if (specs.size() > protocol::kMaxRequestPackages) {
    return Status(Code::kLimitExceeded, "packages: " + std::to_string(specs.size()) +
                                            " packages, above the maximum " +
                                            std::to_string(protocol::kMaxRequestPackages));
  }
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < specs.size(); ++i) {
    const std::string field = "packages[" + std::to_string(i) + "]: ";
    auto parsed = ParsePackageSpec(language, specs[i]);
    if (!parsed.ok()) return parsed.status().WithContext(field.substr(0, field.size() - 2));
    auto [it, fresh] = seen.emplace(parsed->key, i);
    if (!fresh) {
      return InvalidRequest(field + "'" + parsed->name + "' is already packages[" +
                            std::to_string(it->second) + "]");
    }
  }
  return Status::Ok();
}

StatusOr<std::vector<std::string>> MergePackageSpecs(std::string_view language,
                                                     const std::vector<std::string>& a,
                                                     const std::vector<std::string>& b) {
  std::map<std::string, std::string> by_key;  // key -> spec as written
  for (const auto* list : {&a, &b}) {
    for (const std::string& spec : *list) {
      ASSIGN_OR_RETURN(PackageSpec parsed, ParsePackageSpec(language, spec));
      auto [it, fresh] = by_key.emplace(parsed.key, spec);
      if (fresh || it->second == spec) continue;
      return InvalidRequest("packages: '" + spec + "' conflicts with '" + it->second +
                            "', which this session already has");
    }
  }
  if (by_key.size() > protocol::kMaxRequestPackages) {
    return Status(Code::kLimitExceeded, "packages: a session holds at most " +
                                            std::to_string(protocol::kMaxRequestPackages) +
                                            " packages");
  }
  std::vector<std::string> out;
  out.reserve(by_key.size());
  for (auto& [key, spec] : by_key) out.push_back(std::move(spec));
  return out;
}

}  // namespace kiln::common
