// RuntimeCatalog: a worker's Register entries checked (every byte is the
// worker's), and the catalogs of several workers merged for GET /v1/runtimes.
#include "broker/scheduler/runtime_catalog.hpp"

#include <gtest/gtest.h>

namespace kiln::broker {
namespace {

using common::protocol::Register;
using nlohmann::json;

Register Reg(std::vector<std::string> runtimes, std::map<std::string, std::string> versions,
             std::vector<std::string> packages) {
  Register r;
  r.worker_id = "w";
  r.runtimes = std::move(runtimes);
  r.runtime_versions = std::move(versions);
  r.packages = std::move(packages);
  return r;
}

TEST(RuntimeCatalog, KeepsWellFormedEntriesOfOfferedLanguagesOnly) {
  RuntimeCatalog c = ParseRuntimeCatalog(
      Reg({"python", "javascript"},
          {{"python", "3.11.2"}, {"javascript", "18.19.0"}, {"ruby", "3.1"}, {"shell", "5.2"}},
          {"python numpy 1.24.2", "javascript @babel/runtime 7.26.0", "javascript lodash 4.17.21",
           "python numpy 9.9",                          // duplicate name: the first wins
           "ruby rails 7.0",                            // a language the worker does not offer
           "python bad;name 1.0",                       // name outside the charset
           "python pandas 1.5.3 extra",                 // four fields
           "python pandas",                             // two
           "python pandas <script>",                    // version outside the charset
           "python " + std::string(200, 'a') + " 1.0",  // name too long
           "bash 5.2.15(1)-release x"}));
  EXPECT_EQ(c.versions,
            (std::map<std::string, std::string>{{"javascript", "18.19.0"}, {"python", "3.11.2"}}));
  ASSERT_EQ(c.packages["python"].size(), 1u);
  EXPECT_EQ(c.packages["python"][0].name, "numpy");
  EXPECT_EQ(c.packages["python"][0].version, "1.24.2");
  ASSERT_EQ(c.packages["javascript"].size(), 2u);
  EXPECT_EQ(c.packages["javascript"][0].name, "@babel/runtime");  // sorted by name
  EXPECT_EQ(c.packages.count("ruby"), 0u);
  EXPECT_EQ(c.dropped, 2u + 8u);
}

TEST(RuntimeCatalog, MergesWorkersIntoCommonAndPartialPackages) {
  auto a =
      ParseRuntimeCatalog(Reg({"python", "shell"}, {{"python", "3.11.2"}},
                              {"python numpy 1.24.2", "python pandas 1.5.3", "python rare 1"}));
  auto b = ParseRuntimeCatalog(
      Reg({"python"}, {{"python", "3.11.4"}}, {"python numpy 1.24.2", "python pandas 2.0.0"}));
  std::vector<std::string> ra = {"python", "shell"}, rb = {"python"};
  json out = RuntimesJson({{&ra, &a}, {&rb, &b}});
  ASSERT_EQ(out["runtimes"].size(), 2u) << out.dump();
  const json& py = out["runtimes"][0];
  EXPECT_EQ(py["language"], "python");
  EXPECT_EQ(py["workers"], 2);
  EXPECT_EQ(py["versions"], json::parse(R"(["3.11.2", "3.11.4"])"));
  EXPECT_EQ(py["packages"], json::parse(R"([{"name": "numpy", "version": "1.24.2"}])"));
  EXPECT_EQ(py["partial"], json::parse(R"([
      {"name": "pandas", "versions": ["1.5.3", "2.0.0"], "workers": 2},
      {"name": "rare", "versions": ["1"], "workers": 1}])"));
  const json& sh = out["runtimes"][1];
  EXPECT_EQ(sh["language"], "shell");
  EXPECT_EQ(sh["workers"], 1);
  EXPECT_EQ(sh["versions"], json::array());
  EXPECT_EQ(RuntimesJson({}), json::parse(R"({"runtimes": []})"));
}

}  // namespace
}  // namespace kiln::broker
