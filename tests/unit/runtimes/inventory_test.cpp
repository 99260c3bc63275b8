// The worker's inventory of what its sandboxes offer: interpreter versions
// (the real interpreters of this host), python distributions and the
// javascript tree's packages (folders the test builds).
#include "worker/runtimes/inventory.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace kiln::worker::runtimes {
namespace {

namespace fs = std::filesystem;

TEST(Inventory, VersionOutputsOfEachInterpreter) {
  EXPECT_EQ(ParseVersionOutput(Language::kPython, "Python 3.11.2\n"), "3.11.2");
  EXPECT_EQ(ParseVersionOutput(Language::kJavaScript, "v18.19.0\n"), "18.19.0");
  EXPECT_EQ(ParseVersionOutput(Language::kShell,
                               "GNU bash, version 5.2.15(1)-release (x86_64-pc-linux-gnu)\n"
                               "Copyright (C) 2022 Free Software Foundation, Inc.\n"),
            "5.2.15(1)-release");
  EXPECT_EQ(ParseVersionOutput(Language::kPython, "Traceback ...\n"), "");
  EXPECT_EQ(ParseVersionOutput(Language::kJavaScript, ""), "");
  EXPECT_EQ(ParseVersionOutput(Language::kPython, "Python " + std::string(100, '1')), "");
}

TEST(Inventory, RunsTheRealInterpreters) {
  std::string py = InterpreterVersion(Language::kPython, "/usr/bin/python3");
  EXPECT_EQ(py.rfind("3.", 0), 0u) << py;
  std::string sh = InterpreterVersion(Language::kShell, "/bin/bash");
  EXPECT_FALSE(sh.empty());
  EXPECT_EQ(InterpreterVersion(Language::kPython, "/nonexistent/python3"), "");
}

class InventoryDirs : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kiln-inventory-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Write(const std::string& rel, const std::string& text) {
    fs::create_directories(fs::path(dir_ + "/" + rel).parent_path());
    std::ofstream(dir_ + "/" + rel) << text;
  }
  std::string dir_;
};

TEST_F(InventoryDirs, PythonDistributionsFromTheirMetadataFolders) {
  for (const char* d :
       {"a/numpy-1.24.2.dist-info", "a/pandas-1.5.3.egg-info",
        "a/python_dateutil-2.8.2-py3.11.egg-info", "a/numpy", "a/junk.dist-info",
        "a/-1.0.dist-info", "b/numpy-9.9.dist-info", "b/regex-0.1.20221031.egg-info"}) {
    fs::create_directories(dir_ + "/" + d);
  }
  auto got = PythonPackages({dir_ + "/a", dir_ + "/b", dir_ + "/missing"});
  std::vector<PackageVersion> want = {{"numpy", "1.24.2"},
                                      {"pandas", "1.5.3"},
                                      {"python_dateutil", "2.8.2"},
                                      {"regex", "0.1.20221031"}};
  EXPECT_EQ(got, want);
}

TEST_F(InventoryDirs, JavascriptTopLevelPackagesWithTheirVersions) {
  Write("package.json", R"({"dependencies": {"lodash": "^4", "@scope/x": "1", "gone": "1"}})");
  Write("node_modules/lodash/package.json", R"({"name": "lodash", "version": "4.17.21"})");
  Write("node_modules/@scope/x/package.json", R"({"version": "1.0.0"})");
  Write("node_modules/dep-of-lodash/package.json", R"({"version": "2.0.0"})");
  auto got = JavascriptPackages(dir_ + "/node_modules");
  std::vector<PackageVersion> want = {{"@scope/x", "1.0.0"}, {"lodash", "4.17.21"}};
  EXPECT_EQ(got, want);
  EXPECT_TRUE(JavascriptPackages("").empty());
  EXPECT_TRUE(JavascriptPackages(dir_ + "/missing/node_modules").empty());
  // No package.json beside the tree: every top-level package.
  fs::remove(dir_ + "/package.json");
  got = JavascriptPackages(dir_ + "/node_modules");
  want = {{"dep-of-lodash", "2.0.0"}, {"lodash", "4.17.21"}};
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace kiln::worker::runtimes
