#include "common/secrets/literal_automaton.hpp"

#include <algorithm>
#include <deque>

namespace kiln::common {

namespace {
constexpr uint32_t kNone = UINT32_MAX;
}  // namespace

LiteralAutomaton::LiteralAutomaton() : next_(1, kStart), match_length_(1, 0), depth_(1, 0) {}

StatusOr<LiteralAutomaton> LiteralAutomaton::Build(const std::vector<std::string>& literals) {
  LiteralAutomaton ac;
  // Byte classes: class 0 for bytes in no literal, one class per byte that occurs in some.
  std::array<bool, 256> used{};
  size_t total = 0;
  for (const std::string& lit : literals) {
    if (lit.empty()) return InvalidRequest("empty literal");
    for (char c : lit) used[static_cast<unsigned char>(c)] = true;
    total += lit.size();
    ac.max_literal_length_ = std::max(ac.max_literal_length_, lit.size());
  }
  uint32_t classes = 1;
  for (int b = 0; b < 256; ++b) ac.class_of_[b] = used[b] ? classes++ : 0;
  ac.classes_ = classes;
  const size_t max_states = total + 1;
  static_assert(kMaxTableCells <= kStateMask);
  if (max_states * classes > kMaxTableCells) {
    return InvalidRequest("secrets too large: " + std::to_string(literals.size()) + " secrets of " +
                          std::to_string(total) + " bytes in all");
  }

  // Trie, with kNone for missing edges.
  std::vector<uint32_t> next(classes, kNone);
  std::vector<uint32_t> match_length(1, 0);
  std::vector<uint32_t> depth(1, 0);
  for (const std::string& lit : literals) {
    uint32_t state = kStart;
    for (char c : lit) {
      uint32_t& edge = next[state * classes + ac.class_of_[static_cast<unsigned char>(c)]];
      if (edge == kNone) {
        edge = static_cast<uint32_t>(depth.size());
        next.resize(next.size() + classes, kNone);
        match_length.push_back(0);
        depth.push_back(depth[state] + 1);
      }
      state = next[state * classes + ac.class_of_[static_cast<unsigned char>(c)]];
    }
    match_length[state] = static_cast<uint32_t>(lit.size());
  }

  // Breadth-first: failure links, then missing edges follow the failure state's edges (DFA).
  std::vector<uint32_t> fail(depth.size(), kStart);
  std::deque<uint32_t> queue;
  for (uint32_t c = 0; c < classes; ++c) {
    uint32_t& edge = next[c];
    if (edge == kNone) {
      edge = kStart;
    } else {
      queue.push_back(edge);
    }
  }
  while (!queue.empty()) {
    uint32_t state = queue.front();
    queue.pop_front();
    match_length[state] = std::max(match_length[state], match_length[fail[state]]);
    for (uint32_t c = 0; c < classes; ++c) {
      uint32_t& edge = next[state * classes + c];
      uint32_t via_fail = next[fail[state] * classes + c];
      if (edge == kNone) {
        edge = via_fail;
      } else {
        fail[edge] = via_fail;
        queue.push_back(edge);
      }
    }
  }
  // Rows addressed by offset, match bit on edges into states where a literal ends.
  for (uint32_t& edge : next) {
    edge = edge * classes | (match_length[edge] != 0 ? kMatchBit : 0);
  }
  ac.next_ = std::move(next);
  ac.match_length_ = std::move(match_length);
  ac.depth_ = std::move(depth);
  return ac;
}

}  // namespace kiln::common
