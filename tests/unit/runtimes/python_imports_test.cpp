// Reading a python job's imports from its text (python_imports.hpp), and the
// runtime's choice of zygote built on it (Runtime::NeedsPreload), against
// the real interpreter's standard-library list (inventory.hpp).
#include "worker/runtimes/python_imports.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "worker/runtimes/inventory.hpp"
#include "worker/runtimes/runtime.hpp"

namespace kiln::worker::runtimes {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(StaticImports, EveryFormOfTheTwoStatements) {
  EXPECT_THAT(StaticImports("import os\n"), ElementsAre("os"));
  EXPECT_THAT(StaticImports("import os.path as p, numpy as np ,json\n"),
              ElementsAre("os", "numpy", "json"));
  EXPECT_THAT(StaticImports("from pandas.core import frame\nfrom . import x\nfrom .m import y\n"),
              ElementsAre("pandas"));
  EXPECT_THAT(StaticImports("def f():\n    import scipy\n\tfrom re import sub\n"),
              ElementsAre("scipy", "re"));
  EXPECT_THAT(StaticImports("x = 1; import math;from \\\n  numpy import array"),
              ElementsAre("math", "numpy"));
  EXPECT_THAT(StaticImports("try: import ujson as json\nexcept ImportError: import json"),
              ElementsAre("ujson", "json"));
  EXPECT_THAT(StaticImports("import a . b, c"), ElementsAre("a", "c"));
  EXPECT_THAT(StaticImports("import\tx"), ElementsAre("x"));
}

TEST(StaticImports, WordsThatAreNotImportStatements) {
  EXPECT_THAT(StaticImports("raise ValueError('x') from err\n"), IsEmpty());
  EXPECT_THAT(StaticImports("y = (yield from gen())\n"), IsEmpty());
  EXPECT_THAT(StaticImports("# import numpy\nprint('import pandas')\n"), IsEmpty());
  EXPECT_THAT(StaticImports("important = 1\nfromage = 2\nmy_import = 3\nx.import_ = 4"), IsEmpty());
  EXPECT_THAT(StaticImports("import\n"), IsEmpty());
  EXPECT_THAT(StaticImports(""), IsEmpty());
  EXPECT_THAT(StaticImports("from"), IsEmpty());
}

// A hostile job's code: every line continues the statement before it and
// also starts one of its own. Each import is read once (the scan goes on
// after a statement), not once per statement that reaches it: read again
// and again, 5,000 such lines gave 12.5 million names.
TEST(StaticImports, EveryImportIsReadOnce) {
  std::string code = "import a";
  constexpr int kLines = 5000;
  for (int i = 0; i < kLines; ++i) code += " as as, \\\nimport";
  EXPECT_EQ(StaticImports(code).size(), static_cast<size_t>(kLines) + 1);
  EXPECT_TRUE(MayImportBeyond(code, {"a"}));  // `import` is no module it knows
  EXPECT_FALSE(MayImportBeyond(code, {"a", "import"}));
}

TEST(MayImportBeyond, StaticAndDynamicImports) {
  const ModuleSet known = {"os", "json", "sys", "importlib"};
  EXPECT_FALSE(MayImportBeyond("print(1)", known));
  EXPECT_FALSE(MayImportBeyond("import os, json\nfrom sys import argv\n", known));
  EXPECT_TRUE(MayImportBeyond("import os\nimport numpy as np\n", known));
  EXPECT_TRUE(MayImportBeyond("from pandas import DataFrame", known));
  // Dynamic imports could load anything.
  EXPECT_TRUE(MayImportBeyond("m = __import__('os')", known));
  EXPECT_TRUE(MayImportBeyond("import importlib\nm = importlib.import_module('json')", known));
  // Erring towards "beyond": an import statement inside a string counts.
  EXPECT_TRUE(MayImportBeyond("s = '''\nimport numpy\n'''", known));
}

TEST(PythonStdlibModules, TheRealInterpretersList) {
  ModuleSet stdlib = PythonStdlibModules("/usr/bin/python3");
  ASSERT_GT(stdlib.size(), 100u);
  for (const char* m : {"os", "sys", "json", "collections", "asyncio", "__future__"}) {
    EXPECT_EQ(stdlib.count(m), 1u) << m;
  }
  for (const char* m : {"numpy", "pandas", "kiln-stdlib"}) EXPECT_EQ(stdlib.count(m), 0u) << m;
  EXPECT_THAT(PythonStdlibModules("/nonexistent/python3"), IsEmpty());
  EXPECT_THAT(PythonStdlibModules("/bin/true"), IsEmpty());
}

TEST(RuntimeNeedsPreload, OnlyWithPreloadsAndAnImportBeyondTheLeanModules) {
  auto with = Runtime::Create(Language::kPython, RuntimePaths{}, {"numpy", "pandas"},
                              PythonStdlibModules("/usr/bin/python3"));
  ASSERT_TRUE(with.ok()) << with.status().ToString();
  EXPECT_FALSE(with->NeedsPreload("print(1)"));
  EXPECT_FALSE(with->NeedsPreload("import json, math\nfrom collections import Counter"));
  EXPECT_FALSE(with->NeedsPreload("import kiln\nkiln.call('t', {})"));  // the wrappers' own
  EXPECT_TRUE(with->NeedsPreload("import pandas as pd"));
  EXPECT_TRUE(with->NeedsPreload("import scipy"));  // may need numpy: it is there
  auto without = Runtime::Create(Language::kPython, RuntimePaths{});
  ASSERT_TRUE(without.ok());
  EXPECT_FALSE(without->NeedsPreload("import pandas"));
  // Without a standard-library list, any import goes to the preloaded zygote.
  auto unknown = Runtime::Create(Language::kPython, RuntimePaths{}, {"numpy"});
  ASSERT_TRUE(unknown.ok());
  EXPECT_TRUE(unknown->NeedsPreload("import os"));
  EXPECT_FALSE(unknown->NeedsPreload("print(1)"));
  // The two kinds of one-shot sandbox differ only in the zygote's preloads.
  Launch lean = with->OneShotLaunch(false), full = with->OneShotLaunch(true);
  EXPECT_EQ(lean.argv, full.argv);
  ASSERT_EQ(lean.zygote_argv.size(), 6u);
  ASSERT_EQ(full.zygote_argv.size(), 6u);
  EXPECT_EQ(lean.zygote_argv[5], "");
  EXPECT_EQ(full.zygote_argv[5], "numpy,pandas");
  EXPECT_EQ(without->OneShotLaunch(false).zygote_argv, without->OneShotLaunch(true).zygote_argv);
}

}  // namespace
}  // namespace kiln::worker::runtimes
