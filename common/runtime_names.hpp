// Names a runtime cannot give a job, beyond the identifier rule
// (identifier.hpp): `input` keys and `env` names that the interpreter refuses
// to assign or that its wrapper keeps for itself. The broker refuses them at
// submit (400 naming the field); the worker's runtimes refuse them again.
//
//   if (language == "shell" && common::IsBashReadonlyName(name)) return InvalidRequest(...);
//
// docs/api.md ("Submit") lists them. Pure functions; any thread.
#pragma once

#include <algorithm>
#include <array>
#include <string_view>

namespace kiln::common {

// Variables bash refuses to assign (readonly): exporting one fails in the wrapper.
constexpr bool IsBashReadonlyName(std::string_view name) {
  constexpr std::array<std::string_view, 6> kNames = {"BASHOPTS", "BASH_VERSINFO", "EUID",
                                                      "PPID",     "SHELLOPTS",     "UID"};
  return std::find(kNames.begin(), kNames.end(), name) != kNames.end();
}

// The shell session driver's own variables start with this: an input or env
// name with it would overwrite them and break the session.
inline constexpr std::string_view kShellReservedPrefix = "__kiln";

constexpr bool IsShellReservedName(std::string_view name) {
  return name.substr(0, kShellReservedPrefix.size()) == kShellReservedPrefix;
}

// Non-writable properties of JavaScript's global object: assigning an input
// key to one throws in the (strict) wrapper before the code runs.
constexpr bool IsJavaScriptReadonlyGlobal(std::string_view name) {
  return name == "undefined" || name == "NaN" || name == "Infinity";
}

}  // namespace kiln::common
