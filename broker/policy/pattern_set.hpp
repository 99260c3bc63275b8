// PatternSet: finds which of several policy patterns occur in a text, in time
// linear in the text (no backtracking, no recursion).
//
//   ASSIGN_OR_RETURN(PatternSet set, PatternSet::Compile({R"(\bsubprocess\b)", "rm -rf /"}));
//   std::vector<bool> hit = set.Match(code);  // hit[i]: patterns[i] occurs somewhere
//
// Why not std::regex: libstdc++'s engine backtracks recursively, so one long
// line can overflow the stack and a careless pattern such as (\w+\s?)+$ takes
// exponential time on a crafted input; code is untrusted and up to 1 MiB. RE2
// is not available (Debian package not installed). So the patterns (syntax in
// pattern_syntax.hpp) compile into one Thompson NFA, simulated Pike-style: at
// most one thread per instruction, so a Match costs at most
// O(text bytes x instructions), and instructions are capped (kMaxInstructions).
// Before that, one Aho-Corasick pass looks for each pattern's required
// literals (required_literals.hpp); a pattern none of whose literals occurs is
// not run at all, so ordinary code costs about a table lookup per byte. Inside
// the NFA a pattern is only started at bytes that can begin it.
// Immutable after Compile; any thread may call Match on a const instance.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "broker/policy/pattern_syntax.hpp"
#include "common/secrets/literal_automaton.hpp"
#include "common/status.hpp"

namespace kiln::broker {

class PatternSet {
 public:
  // Upper bound on the compiled program of one set (all its patterns).
  static constexpr size_t kMaxInstructions = 20000;

  PatternSet() = default;  // matches nothing

  // INVALID_REQUEST "pattern <i>: offset N: what" for the first bad pattern;
  // a pattern that can match the empty string is refused (it would match any text).
  static common::StatusOr<PatternSet> Compile(const std::vector<std::string>& patterns);

  // Whether `pattern` alone compiles; the error is Compile's, without the "pattern <i>: ".
  static common::Status Check(std::string_view pattern);

  // matched[i] tells whether patterns[i] occurs anywhere in `text`.
  std::vector<bool> Match(std::string_view text) const;

  size_t size() const { return starts_.size(); }
  size_t instructions() const { return program_.size(); }

 private:
  enum class Op : uint8_t { kByte, kSplit, kJump, kAssert, kMatch };
  struct Inst {
    Op op = Op::kMatch;
    PatternAssert assertion = PatternAssert::kLineStart;
    uint32_t x = 0;  // kByte: class index; kSplit, kJump: target; kMatch: pattern index
    uint32_t y = 0;  // kSplit: second target
  };
  class Compiler;
  class Run;

  // Parses and emits one pattern; *literals gets its required literals.
  common::Status Add(Compiler* compiler, std::string_view pattern,
                     std::optional<std::vector<std::string>>* literals);
  void IndexStarts();
  common::Status BuildPrefilter(
      const std::vector<std::optional<std::vector<std::string>>>& literals);
  // Which patterns can occur at all: those without a gate, and those one of
  // whose literals occurs in `text`.
  std::vector<bool> Candidates(std::string_view text) const;

  std::vector<Inst> program_;
  std::vector<ByteClass> classes_;
  std::vector<uint32_t> owner_;   // program pc -> pattern index
  std::vector<uint32_t> starts_;  // pattern index -> first pc
  // Patterns whose first byte can be b: starter_ids_[starter_begin_[b], starter_begin_[b + 1]).
  std::array<uint32_t, 257> starter_begin_{};
  std::vector<uint32_t> starter_ids_;

  // The prefilter. The automaton reports the longest literal ending at each
  // position; the others ending there are its suffixes, listed in suffixes_.
  common::LiteralAutomaton literals_;
  std::map<std::string, uint32_t, std::less<>> literal_ids_;
  std::vector<std::vector<uint32_t>> suffixes_;  // literal id -> ids of its suffixes, itself too
  std::vector<std::vector<uint32_t>> gates_;     // pattern -> literal ids; empty: always runs
};

}  // namespace kiln::broker
