#include "common/secrets/literal_automaton.hpp"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <utility>

namespace kiln::common {
namespace {

using Hits = std::set<std::pair<size_t, size_t>>;  // (end, longest length ending there)

Hits RunAutomaton(const LiteralAutomaton& ac, std::string_view text) {
  Hits hits;
  uint32_t state = LiteralAutomaton::kStart;
  for (size_t i = 0; i < text.size(); ++i) {
    state = ac.Step(state, static_cast<unsigned char>(text[i]));
    if (ac.match_length(state) != 0) hits.insert({i + 1, ac.match_length(state)});
  }
  return hits;
}

Hits Naive(const std::vector<std::string>& literals, std::string_view text) {
  std::map<size_t, size_t> longest;
  for (const std::string& lit : literals) {
    for (size_t at = text.find(lit); at != std::string_view::npos; at = text.find(lit, at + 1)) {
      size_t& l = longest[at + lit.size()];
      l = std::max(l, lit.size());
    }
  }
  return Hits(longest.begin(), longest.end());
}

size_t NaiveDepth(const std::vector<std::string>& literals, std::string_view text) {
  size_t best = 0;
  for (const std::string& lit : literals) {
    for (size_t len = std::min(lit.size(), text.size()); len > best; --len) {
      if (text.substr(text.size() - len) == std::string_view(lit).substr(0, len)) {
        best = len;
        break;
      }
    }
  }
  return best;
}

TEST(LiteralAutomaton, EmptyMatchesNothing) {
  LiteralAutomaton ac;
  EXPECT_TRUE(ac.empty());
  EXPECT_TRUE(RunAutomaton(ac, "anything at all").empty());
}

TEST(LiteralAutomaton, RefusesEmptyLiteral) {
  EXPECT_EQ(LiteralAutomaton::Build({"abc", ""}).status().code(), Code::kInvalidRequest);
}

TEST(LiteralAutomaton, RefusesTablesOverBudget) {
  // 256 byte classes x (total bytes + 1) states over kMaxTableCells.
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  std::vector<std::string> lits(LiteralAutomaton::kMaxTableCells / (256 * 256) + 1, all);
  EXPECT_EQ(LiteralAutomaton::Build(lits).status().code(), Code::kInvalidRequest);
}

TEST(LiteralAutomaton, FindsOverlappingAndNestedLiterals) {
  std::vector<std::string> lits = {"he", "she", "his", "hers"};
  StatusOr<LiteralAutomaton> ac = LiteralAutomaton::Build(lits);
  ASSERT_TRUE(ac.ok());
  EXPECT_EQ(RunAutomaton(*ac, "ushers"), (Hits{{4, 3}, {6, 4}}));
  EXPECT_EQ(ac->max_literal_length(), 4u);
}

TEST(LiteralAutomaton, MatchesNaiveSearchOnRandomInput) {
  std::mt19937 rng(7);
  for (int iter = 0; iter < 2000; ++iter) {
    const int alphabet = 2 + static_cast<int>(rng() % 3);  // small, so matches are frequent
    auto random_string = [&](size_t len) {
      std::string s;
      for (size_t i = 0; i < len; ++i) s += static_cast<char>('a' + rng() % alphabet);
      return s;
    };
    std::vector<std::string> lits;
    for (size_t n = 1 + rng() % 6; n > 0; --n) lits.push_back(random_string(1 + rng() % 6));
    StatusOr<LiteralAutomaton> ac = LiteralAutomaton::Build(lits);
    ASSERT_TRUE(ac.ok());
    const std::string text = random_string(rng() % 80);
    ASSERT_EQ(RunAutomaton(*ac, text), Naive(lits, text)) << text;
    uint32_t state = LiteralAutomaton::kStart;
    for (size_t i = 0; i < text.size(); ++i) {
      state = ac->Step(state, static_cast<unsigned char>(text[i]));
      ASSERT_EQ(ac->depth(state), NaiveDepth(lits, std::string_view(text).substr(0, i + 1)));
    }
  }
}

}  // namespace
}  // namespace kiln::common
