#include "broker/policy/required_literals.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "broker/policy/pattern_set.hpp"

namespace kiln::broker {
namespace {

using ::testing::Optional;
using ::testing::UnorderedElementsAre;

std::optional<std::vector<std::string>> Literals(const std::string& pattern) {
  auto tree = ParsePattern(pattern);
  EXPECT_TRUE(tree.ok()) << pattern;
  return tree.ok() ? RequiredLiterals(*tree) : std::nullopt;
}

TEST(RequiredLiterals, FindsStringsEveryMatchContains) {
  EXPECT_THAT(Literals(R"(\bsubprocess\b)"), Optional(UnorderedElementsAre("subprocess")));
  EXPECT_THAT(Literals("cat|dog"), Optional(UnorderedElementsAre("cat", "dog")));
  EXPECT_THAT(Literals("a?bc"), Optional(UnorderedElementsAre("abc", "bc")));
  EXPECT_THAT(Literals("x[ab]{2}"), Optional(UnorderedElementsAre("xaa", "xab", "xba", "xbb")));
  // The longest necessary piece wins over shorter ones ("os", ".").
  EXPECT_THAT(Literals(R"(\bos\s*\.\s*(system|popen)\s*\()"),
              Optional(UnorderedElementsAre("popen", "system")));
  EXPECT_THAT(Literals("q(ab)+q"), Optional(UnorderedElementsAre("ab")));
  EXPECT_THAT(Literals("--no-preserve-root|\\brm\\s"),
              Optional(UnorderedElementsAre("--no-preserve-root", "rm\t", "rm\n", "rm\v", "rm\f",
                                            "rm\r", "rm ")));
}

TEST(RequiredLiterals, GivesUpWhenNoStringIsNecessary) {
  EXPECT_EQ(Literals("[a-z]+x"), std::nullopt);
  EXPECT_EQ(Literals("ab|c"), std::nullopt);     // "c" alone is too short to filter
  EXPECT_EQ(Literals("(abc)?d"), std::nullopt);  // the optional part may be absent
  EXPECT_EQ(Literals("x.*y"), std::nullopt);
}

// The automaton reports only the longest literal ending at a position; a
// shorter literal ending there too ("sh" in "bash") must still count.
TEST(RequiredLiterals, PrefilterSeesLiteralsThatAreSuffixesOfOthers) {
  auto set = PatternSet::Compile({"bash", R"(sh\b)", "xsh"});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->Match("run bash now"), (std::vector<bool>{true, true, false}));
  EXPECT_EQ(set->Match("run xsh"), (std::vector<bool>{false, true, true}));
}

}  // namespace
}  // namespace kiln::broker
