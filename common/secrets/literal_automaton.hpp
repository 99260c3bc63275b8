// LiteralAutomaton: an Aho–Corasick automaton over bytes that finds every occurrence of a fixed
// set of literal strings (the registered secrets) in one pass, at a cost per byte that does not
// grow with the number of literals. It is compiled to a dense DFA over byte classes (bytes that
// occur in no literal share one class), so a step is one table load.
//
//   ASSIGN_OR_RETURN(LiteralAutomaton ac, LiteralAutomaton::Build({"hunter22", "s3cr3t!"}));
//   state = ac.Scan(state, text, [](size_t end, uint32_t length) { /* text[end-length, end) */ });
//
// Immutable once built; any thread may use a const instance. Callers keep the state.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.hpp"

namespace kiln::common {

class LiteralAutomaton {
 public:
  // Upper bound on states x byte classes (4 bytes each): 16 MiB of table.
  static constexpr size_t kMaxTableCells = size_t{1} << 22;

  // An automaton that matches nothing.
  LiteralAutomaton();

  // INVALID_REQUEST when a literal is empty or the table would exceed kMaxTableCells.
  // Duplicates are allowed.
  static StatusOr<LiteralAutomaton> Build(const std::vector<std::string>& literals);

  static constexpr uint32_t kStart = 0;

  // States are opaque handles; kStart is the state before any byte.
  uint32_t Step(uint32_t state, unsigned char byte) const {
    return next_[state + class_of_[byte]] & kStateMask;
  }
  // Feeds `text` from `state`; for each position where a literal ends, calls
  // on_match(end offset in text, length of the longest literal ending there). Returns the state.
  template <typename OnMatch>
  uint32_t Scan(uint32_t state, std::string_view text, OnMatch&& on_match) const {
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    const size_t n = text.size();
    for (size_t i = 0; i < n; ++i) {
      const uint32_t edge = next_[state + class_of_[p[i]]];
      state = edge & kStateMask;
      if (edge & kMatchBit) on_match(i + 1, match_length(state));
    }
    return state;
  }
  // Length of the longest literal that ends at the byte that led to `state`; 0 when none does.
  uint32_t match_length(uint32_t state) const { return match_length_[state / classes_]; }
  // Length of the longest suffix of the text so far that is a prefix of some literal: no
  // future occurrence can start more than depth() bytes before the end of the text so far.
  uint32_t depth(uint32_t state) const { return depth_[state / classes_]; }

  size_t max_literal_length() const { return max_literal_length_; }
  bool empty() const { return max_literal_length_ == 0; }
  size_t state_count() const { return depth_.size(); }

 private:
  static constexpr uint32_t kMatchBit = 1u << 31;
  static constexpr uint32_t kStateMask = kMatchBit - 1;

  std::array<uint16_t, 256> class_of_{};
  uint32_t classes_ = 1;
  // next_[state + class]: the next state (a state is its row's offset, id * classes_), with
  // kMatchBit set when a literal ends there.
  std::vector<uint32_t> next_;
  std::vector<uint32_t> match_length_;
  std::vector<uint32_t> depth_;
  size_t max_literal_length_ = 0;
};

}  // namespace kiln::common
