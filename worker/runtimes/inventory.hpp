// Inventory: what this worker's sandboxes offer per language, for the
// brokers (Register.runtime_versions and Register.packages, shown by
// GET /v1/runtimes): the interpreter's version and the installed packages
// with their versions (docs/runtimes.md, "Package sets").
//
//   auto v = InterpreterVersion(Language::kPython, "/usr/bin/python3");   // "3.11.2"
//   auto py = PythonPackages(PythonPackageDirs());
//   ModuleSet stdlib = PythonStdlibModules("/usr/bin/python3");  // for Runtime::Create
//   auto js = JavascriptPackages("/usr/local/lib/kiln/javascript/node_modules");
//
// Taken once by kiln-worker's main at start; InterpreterVersion and
// PythonStdlibModules run the configured interpreter (trusted configuration,
// outside any sandbox), the rest only reads folders. Any thread.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "worker/runtimes/runtime.hpp"

namespace kiln::worker::runtimes {

struct PackageVersion {
  std::string name;
  std::string version;
  friend bool operator==(const PackageVersion&, const PackageVersion&) = default;
};

// The version `<interpreter> --version` prints ("3.11.2", "18.19.0",
// "5.2.15(1)-release"), waiting at most 5 s; "" when it fails.
std::string InterpreterVersion(Language language, const std::string& interpreter);
// The top-level modules of `interpreter`'s standard library
// (`sys.stdlib_module_names`, python 3.10+; the same 5 s bound); empty when
// it cannot tell (an older python, a failed start).
ModuleSet PythonStdlibModules(const std::string& interpreter);
// Parses that output (the first line): "Python 3.11.2", "v18.19.0",
// "GNU bash, version 5.2.15(1)-release (...)"; "" when it does not match.
std::string ParseVersionOutput(Language language, const std::string& output);

// The Debian python's package folders that exist: /usr/lib/python3/dist-packages,
// /usr/lib/python3.*/dist-packages, /usr/local/lib/python3.*/dist-packages.
std::vector<std::string> PythonPackageDirs();
// Every distribution with a `<name>-<version>.dist-info` or `.egg-info`
// entry in `dirs`, by name (a name found twice: the first folder's).
std::vector<PackageVersion> PythonPackages(const std::vector<std::string>& dirs);
// The tree's top-level packages: the `dependencies` of the package.json
// next to it (node_modules/../package.json; all top-level folders when
// there is none), each with the version of its own package.json. Empty
// when `node_modules` is empty or missing.
std::vector<PackageVersion> JavascriptPackages(const std::string& node_modules);

// What a worker registers with (Register.runtime_versions, Register.packages).
struct RuntimeOffer {
  std::map<std::string, std::string> versions;  // language -> interpreter version
  std::vector<std::string> packages;            // "<language> <name> <version>"
};
// The offer of these runtimes: python's packages from PythonPackageDirs(),
// javascript's from `node_modules` (the sandboxes' tree), at most
// common::protocol::kMaxPackages entries.
RuntimeOffer TakeInventory(const std::map<Language, Runtime>& runtimes,
                           const std::string& node_modules);

}  // namespace kiln::worker::runtimes
