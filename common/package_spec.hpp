// Package specs: what a job may write in `packages` (docs/api.md), checked by
// the broker at submit and again by the worker before it installs anything.
//
//   RETURN_IF_ERROR(ValidatePackageSpecs("python", {"requests==2.31.0", "tabulate"}));
//   ASSIGN_OR_RETURN(auto set, MergePackageSpecs("python", session_set, job.packages));
//
// A spec is a name, optionally pinned to one version: python `name` or
// `name==version` (PEP 508 names, PEP 440 version characters), javascript
// `name`, `@scope/name`, `name@version` (npm names; a version or a dist-tag).
// Nothing else passes: no URLs, paths, ranges, extras, markers or options, so
// a spec can never steer the installer (pip, npm) anywhere but the
// operator's index. Pure functions; any thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.hpp"

namespace kiln::common {

struct PackageSpec {
  std::string name;     // as written
  std::string key;      // the name compared for duplicates (python: PEP 503 normalized)
  std::string version;  // empty: the newest the index has
};

// The languages that take packages: python and javascript (not shell).
bool TakesPackages(std::string_view language);

// INVALID_REQUEST naming what is wrong with `spec`.
StatusOr<PackageSpec> ParsePackageSpec(std::string_view language, std::string_view spec);

// Every spec parses, at most protocol::kMaxRequestPackages of them, no name
// twice; messages start with `packages` or `packages[i]`. An empty list
// passes for every language.
Status ValidatePackageSpecs(std::string_view language, const std::vector<std::string>& specs);

// The specs of `a` and `b` together, sorted by name, each once: what a
// session holds after an execution that asked for `b`. A name pinned
// differently in the two (or pinned in one, not the other) is
// INVALID_REQUEST; so is a union over kMaxRequestPackages.
StatusOr<std::vector<std::string>> MergePackageSpecs(std::string_view language,
                                                     const std::vector<std::string>& a,
                                                     const std::vector<std::string>& b);

}  // namespace kiln::common
