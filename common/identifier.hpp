// IsIdentifier: the one rule for names a job hands to a runtime — `input`
// keys (variables in python/javascript, environment variables in shell) and
// `env` names: [A-Za-z_][A-Za-z0-9_]*, 1 to 128 characters.
//
//   if (!common::IsIdentifier(key)) return InvalidRequest("bad name " + key);
//
// The broker validates with it, the worker re-checks, the CLI checks early.
// Pure function; any thread.
#pragma once

#include <string_view>

namespace kiln::common {

inline constexpr size_t kMaxIdentifierBytes = 128;

constexpr bool IsIdentifier(std::string_view name) {
  if (name.empty() || name.size() > kMaxIdentifierBytes) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

}  // namespace kiln::common
