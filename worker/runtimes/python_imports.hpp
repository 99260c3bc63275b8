// PythonImports: which modules a python job's code imports, read from its
// text without running it, so the worker can pick the zygote that serves it
// (runtime.hpp, Runtime::NeedsPreload; docs/runtimes.md, "Package sets").
//
//   if (MayImportBeyond(code, stdlib)) { /* the zygote with the preloads */ }
//
// A heuristic that only decides speed, never behaviour: a job sent to the
// lean zygote that imports numpy after all imports it itself (slowly), and
// one sent to the preloaded zygote pays its bigger fork. So it errs towards
// "beyond": text in strings that looks like an import counts. Pure; any thread.
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::worker::runtimes {

using ModuleSet = std::set<std::string, std::less<>>;

// The top-level module of every `import a.b, c as d` and `from a.b import x`
// statement found in `code`, in order, repeats kept ("a", "c", "a"). A
// statement counts where it starts a line (after indentation) or follows a
// `;` or a `:` (`try: import x`). Relative imports (`from . import x`) are
// left out: they name no top-level module.
std::vector<std::string_view> StaticImports(std::string_view code);

// Whether `code` may import a module outside `known`: a static import of a
// top-level module not in it, or a dynamic import (`__import__`,
// `importlib.import_module`) of anything.
bool MayImportBeyond(std::string_view code, const ModuleSet& known);

}  // namespace kiln::worker::runtimes
