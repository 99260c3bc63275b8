#include "broker/policy/pattern_set.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <regex>

namespace kiln::broker {
namespace {

using ::testing::HasSubstr;

bool Occurs(const std::string& pattern, std::string_view text) {
  auto set = PatternSet::Compile({pattern});
  EXPECT_TRUE(set.ok()) << pattern << ": " << set.status().ToString();
  if (!set.ok()) return false;
  return set->Match(text).at(0);
}

struct Case {
  const char* pattern;
  const char* text;
  bool occurs;
};

TEST(PatternSet, MatchesTheSupportedSyntax) {
  const Case cases[] = {
      {"abc", "xxabcxx", true},
      {"abc", "ab c", false},
      {"a.c", "a-c", true},
      {"a.c", "a\nc", false},
      {"[a-c]x", "bx", true},
      {"[a-c]x", "dx", false},
      {"[^a-c]x", "dx", true},
      {"[^a-c]x", "ax", false},
      {R"([\w-]+=)", "--no-thing=", true},
      {R"(\d{3}-\d{2})", "call 555-12 now", true},
      {R"(\d{3}-\d{2})", "call 55-12 now", false},
      {"ab{2,3}c", "abbc", true},
      {"ab{2,3}c", "abbbbc", false},
      {"ab{2,}c", "abbbbbc", true},
      {"ab{2}c", "abbc", true},
      {"ab?c", "ac", true},
      {"ab+c", "ac", false},
      {"ab*c", "ac", true},
      {"(?:ab)+c", "ababc", true},
      {"cat|dog", "hotdog", true},
      {"cat|dog", "cow", false},
      {"^import", "x = 1\nimport os", true},
      {"^import", "x = 1; import os", false},
      {"os$", "import os\nx", true},
      {"os$", "import osx", false},
      {R"(\bsub\b)", "a sub b", true},
      {R"(\bsub\b)", "subprocess", false},
      {R"(\Bprocess)", "subprocess", true},
      {R"(\Bprocess)", "a process", false},
      {R"(\s+\|)", "a \t|", true},
      {R"(\S\|)", "a |", false},
      {R"(\x41\.)", "A.", true},
      {R"(\(\))", "f()", true},
      {"a*?b", "aab", true},
      {"x[.]y", "x.y", true},
      {"x[.]y", "xay", false},
      {"\xc3\xa9t\xc3\xa9", "\xc3\xa9t\xc3\xa9 chaud", true},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(Occurs(c.pattern, c.text), c.occurs) << c.pattern << " in " << c.text;
  }
}

TEST(PatternSet, ReportsEachPatternOfASetSeparately) {
  auto set = PatternSet::Compile({"alpha", "beta", R"(\bgam+a\b)", "delta$"});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->Match("beta and gammma"), (std::vector<bool>{false, true, true, false}));
  EXPECT_EQ(set->Match("alpha delta"), (std::vector<bool>{true, false, false, true}));
  EXPECT_EQ(set->Match(""), (std::vector<bool>{false, false, false, false}));
  auto empty = PatternSet::Compile({});
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->Match("anything").empty());
}

// Our matcher against libstdc++'s std::regex (ECMAScript + multiline) on random
// short input over a small alphabet: both must agree on "occurs somewhere".
// '\r' is left out: libstdc++ does not treat it as a line terminator for ^,
// ECMAScript (and we) do.
TEST(PatternSet, AgreesWithStdRegexOnShortInputs) {
  const std::vector<std::string> patterns = {
      "ab",
      "a|b c",
      "(ab|a)c",
      "a*b",
      "(a|b)*c",
      "a{2,3}",
      "^a",
      "b$",
      "^a.b$",
      R"(\ba)",
      R"(a\b)",
      R"(\Bb)",
      "[^ab]",
      R"([a\-]+c)",
      R"(\s+a)",
      R"(\w\W)",
      "(a+)+c",
      "(?:a|)b",
      "a?b?c",
      "(a|ab)(c|bcd)",
      R"(\|\s*a)",
      "c[ab]{0,2}c",
      R"(^\s*a\b)",
      "(a*)*b",
      "x(a|b)*y",
      // Gated by required literals (the prefilter decides whether they run at all).
      "abc|xy",
      "c(ab)+c",
      "a[bc]{2}",
      "(?:ab|ba)_?c",
      R"(\bxy\b|ab\s)",
      "y_?x",
      "ca|ac",
      "a(b|c)(b|c)a",
  };
  const std::string alphabet = "ab c\n_|-xy";
  std::mt19937 rng(12345);
  // Each pattern alone, and all of them as one set (shared program and prefilter).
  auto all = PatternSet::Compile(patterns);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  std::vector<PatternSet> singles;
  std::vector<std::regex> oracles;
  for (const auto& p : patterns) {
    auto set = PatternSet::Compile({p});
    ASSERT_TRUE(set.ok()) << p << ": " << set.status().ToString();
    singles.push_back(std::move(set).value());
    oracles.emplace_back(p, std::regex::ECMAScript | std::regex::multiline);
  }
  for (int n = 0; n < 4000; ++n) {
    std::string text(rng() % 13, ' ');
    for (auto& ch : text) ch = alphabet[rng() % alphabet.size()];
    const std::vector<bool> together = all->Match(text);
    for (size_t i = 0; i < patterns.size(); ++i) {
      const bool expected = std::regex_search(text, oracles[i]);
      ASSERT_EQ(singles[i].Match(text)[0], expected)
          << "pattern " << patterns[i] << " text '" << text << "'";
      ASSERT_EQ(together[i], expected)
          << "in a set: pattern " << patterns[i] << " text '" << text << "'";
    }
  }
}

TEST(PatternSet, RefusesUnsupportedAndBrokenPatterns) {
  const std::pair<const char*, const char*> cases[] = {
      {R"((a)\1)", "back-references are not supported"},
      {"(?=a)b", "lookaround"},
      {"(?<n>a)", "lookaround and named groups"},
      {"(ab", "missing )"},
      {"ab)", "unmatched )"},
      {"[ab", "missing ]"},
      {"[]", "empty class"},
      {"[z-a]", "range out of order"},
      {R"([\w-z])", "shorthand cannot bound a range"},
      {"a{2", "bad repetition"},
      {"a{3,2}", "m < n"},
      {"a{101}", "above 100"},
      {"a{1,1000}", "above 100"},
      {"*a", "nothing to repeat"},
      {"a**", "nothing to repeat"},
      {"^*", "nothing to repeat"},
      {"a\\", "trailing backslash"},
      {R"(\q)", "unsupported escape \\q"},
      {R"(\xZZ)", "two hex digits"},
      {"[\xc3\xa9]", "non-ASCII"},
      {"a*", "empty string"},
      {"(a|)", "empty string"},
      {R"(^\b$)", "empty string"},
      {"", "empty pattern"},
  };
  for (const auto& [pattern, message] : cases) {
    common::Status st = PatternSet::Check(pattern);
    EXPECT_EQ(st.code(), common::Code::kInvalidRequest) << pattern;
    EXPECT_THAT(st.message(), HasSubstr(message)) << pattern;
  }
  auto set = PatternSet::Compile({"fine", "(bad"});
  ASSERT_FALSE(set.ok());
  EXPECT_THAT(set.status().message(), HasSubstr("pattern 1: offset 4: missing )"));

  std::string deep;
  for (int i = 0; i < 40; ++i) deep += "(";
  deep += "a";
  for (int i = 0; i < 40; ++i) deep += ")";
  EXPECT_THAT(PatternSet::Check(deep).message(), HasSubstr("nested deeper"));
  EXPECT_THAT(PatternSet::Check(std::string(3000, 'a')).message(), HasSubstr("longer than"));
}

TEST(PatternSet, CapsTheProgramSize) {
  // 100 x 100 x 100 copies of one byte would be a million instructions.
  common::Status st = PatternSet::Check("((a{100}){100}){100}");
  EXPECT_THAT(st.message(), HasSubstr("too large"));
  EXPECT_TRUE(PatternSet::Check("(a{100}){100}").ok());
}

// Patterns that make a backtracking engine take exponential time, on 1 MiB of
// input without a newline. Linear time is well under a second here, and
// up to 27 s in a sanitizer build; a backtracking or quadratic matcher
// would take hours (or overflow the stack).
TEST(PatternSet, PathologicalPatternsStayLinearOnOneMebibyte) {
  const std::string text(1 << 20, 'a');
  auto set = PatternSet::Compile({"(a|a)*b", "(a+)+b", R"((\w+\s?)+$)", "(a|aa)*c", "a.*.*.*z"});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  const auto start = std::chrono::steady_clock::now();
  const std::vector<bool> hit = set->Match(text);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(hit, (std::vector<bool>{false, false, true, false, false}));
#ifdef KILN_SANITIZE
  EXPECT_LT(elapsed, std::chrono::seconds(120));
#else
  EXPECT_LT(elapsed, std::chrono::seconds(10));
#endif
}

}  // namespace
}  // namespace kiln::broker
