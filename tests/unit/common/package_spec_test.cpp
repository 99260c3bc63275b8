// Package specs (common/package_spec.hpp): what passes, what does not, and
// how a session's specs merge.
#include "common/package_spec.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kiln::common {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(PackageSpecTest, PythonNamesAndPins) {
  auto p = ParsePackageSpec("python", "Requests==2.31.0");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->name, "Requests");
  EXPECT_EQ(p->key, "requests");
  EXPECT_EQ(p->version, "2.31.0");
  EXPECT_EQ(ParsePackageSpec("python", "zope.interface")->key, "zope-interface");
  EXPECT_EQ(ParsePackageSpec("python", "a_b--c")->key, "a-b-c");
  EXPECT_EQ(ParsePackageSpec("python", "x==1!2.0rc1+local.7")->version, "1!2.0rc1+local.7");
  for (const char* bad :
       {"", "-x", "x-", "x y", "x>=1", "x==", "x==1 ", "x[extra]", "x; os_name",
        "x @ https://e/x.whl", "--index-url", "../x", "x==>1", "x===1", "x==1,<2", "x==*"}) {
    auto r = ParsePackageSpec("python", bad);
    EXPECT_FALSE(r.ok()) << "'" << bad << "' passed";
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Code::kInvalidRequest) << bad;
    }
  }
  EXPECT_FALSE(ParsePackageSpec("python", std::string(101, 'a')).ok());
}

TEST(PackageSpecTest, NpmNamesAndVersions) {
  auto p = ParsePackageSpec("javascript", "@types/node@20.1.0");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->name, "@types/node");
  EXPECT_EQ(p->version, "20.1.0");
  EXPECT_EQ(ParsePackageSpec("javascript", "lodash")->version, "");
  EXPECT_EQ(ParsePackageSpec("javascript", "decimal.js@latest")->version, "latest");
  for (const char* bad :
       {"", "Lodash", ".x", "_x", "@scope", "@/x", "@s/", "x@", "x@^1.2", "x@>=1", "x@1 || 2",
        "file:../x", "git+ssh://x", "http://e/x.tgz", "x/y", "../x", "-x", "@s/x/y"}) {
    EXPECT_FALSE(ParsePackageSpec("javascript", bad).ok()) << "'" << bad << "' passed";
  }
}

TEST(PackageSpecTest, ListsAreBoundedWithoutDuplicates) {
  EXPECT_TRUE(ValidatePackageSpecs("shell", {}).ok());
  Status st = ValidatePackageSpecs("shell", {"jq"});
  EXPECT_EQ(st.code(), Code::kInvalidRequest);
  EXPECT_THAT(st.message(), StartsWith("packages: "));
  st = ValidatePackageSpecs("python", {"a", "b", "A==1"});
  EXPECT_EQ(st.code(), Code::kInvalidRequest);
  EXPECT_THAT(st.message(), StartsWith("packages[2]: "));
  EXPECT_THAT(st.message(), HasSubstr("packages[0]"));
  st = ValidatePackageSpecs("python", {"ok", "not ok"});
  EXPECT_THAT(st.message(), StartsWith("packages[1]: 'not ok'"));
  std::vector<std::string> many;
  for (int i = 0; i < 33; ++i) many.push_back("p" + std::to_string(i));
  EXPECT_EQ(ValidatePackageSpecs("python", many).code(), Code::kLimitExceeded);
  many.pop_back();
  EXPECT_TRUE(ValidatePackageSpecs("python", many).ok());
}

TEST(PackageSpecTest, MergeKeepsEveryNameOnceAndRefusesConflicts) {
  auto m = MergePackageSpecs("python", {"tabulate", "b==1"}, {"b==1", "a"});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(*m, (std::vector<std::string>{"a", "b==1", "tabulate"}));
  auto conflict = MergePackageSpecs("python", {"b==1"}, {"B==2"});
  EXPECT_EQ(conflict.status().code(), Code::kInvalidRequest);
  EXPECT_THAT(conflict.status().message(), HasSubstr("conflicts with 'b==1'"));
  EXPECT_FALSE(MergePackageSpecs("python", {"b"}, {"b==1"}).ok()) << "pinned after unpinned";
  std::vector<std::string> a, b;
  for (int i = 0; i < 20; ++i) a.push_back("a" + std::to_string(i));
  for (int i = 0; i < 20; ++i) b.push_back("b" + std::to_string(i));
  EXPECT_EQ(MergePackageSpecs("python", a, b).status().code(), Code::kLimitExceeded);
}

}  // namespace
}  // namespace kiln::common
