// The syntax of policy patterns: a subset of ECMAScript regular expressions,
// parsed into a small tree that PatternSet compiles into a linear-time matcher.
//
//   ASSIGN_OR_RETURN(PatternNode tree, ParsePattern(R"(\bos\.system\s*\()"));
//   bool useless = CanMatchEmpty(tree);  // such a pattern would match any code
//
// Supported: literals, `.`, classes `[a-z_]` `[^...]`, `\d \D \w \W \s \S`,
// `\n \r \t \f \v \0 \xHH`, escaped punctuation, groups `(...)` `(?:...)`, `|`,
// `* + ? {n} {n,} {n,m}` (a trailing `?` for laziness is accepted; it cannot
// change whether a pattern occurs), and the assertions `^ $ \b \B`.
// Refused with an error naming the offset: back-references, lookaround, named
// groups, unknown letter escapes, repetition counts above kMaxRepeat, nesting
// deeper than kMaxDepth, non-ASCII bytes inside classes.
// Matching is over bytes with the ECMAScript `multiline` flag: `^`/`$` hold at
// line starts/ends, `.` matches any byte but `\n` and `\r`.
// Pure functions and plain data: any thread.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "common/status.hpp"

namespace kiln::broker {

// A set of bytes.
struct ByteClass {
  std::array<uint64_t, 4> bits{};

  void Add(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void AddRange(uint8_t lo, uint8_t hi) {
    for (unsigned b = lo; b <= hi; ++b) Add(static_cast<uint8_t>(b));
  }
  void Merge(const ByteClass& o) {
    for (size_t i = 0; i < bits.size(); ++i) bits[i] |= o.bits[i];
  }
  void Invert() {
    for (auto& w : bits) w = ~w;
  }
  bool Has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
};

enum class PatternAssert : uint8_t { kLineStart, kLineEnd, kWordBoundary, kNotWordBoundary };

struct PatternNode {
  enum class Kind : uint8_t { kEmpty, kBytes, kAssert, kConcat, kAlternate, kRepeat };
  static constexpr uint32_t kUnbounded = UINT32_MAX;

  Kind kind = Kind::kEmpty;
  ByteClass bytes;                                      // kBytes: one byte from this set
  PatternAssert assertion = PatternAssert::kLineStart;  // kAssert
  std::vector<PatternNode> children;                    // kConcat, kAlternate; kRepeat: one
  uint32_t min = 0;                                     // kRepeat
  uint32_t max = 0;                                     // kRepeat; kUnbounded for * and +
};

inline constexpr size_t kMaxPatternBytes = 2048;
inline constexpr uint32_t kMaxRepeat = 100;
inline constexpr int kMaxDepth = 32;

// INVALID_REQUEST "offset N: what" on a syntax error or an unsupported construct.
common::StatusOr<PatternNode> ParsePattern(std::string_view pattern);

// Whether the tree can match without consuming a byte (assertions count as empty).
bool CanMatchEmpty(const PatternNode& node);

}  // namespace kiln::broker
