#include "broker/policy/required_literals.hpp"

#include <algorithm>
#include <set>

namespace kiln::broker {
namespace {

using Kind = PatternNode::Kind;
using Set = std::set<std::string>;

constexpr size_t kMaxStrings = 32;  // per set: cross products and unions stop growing here
constexpr size_t kMaxLength = 32;
constexpr size_t kMaxClassExpansion = 8;  // a class of up to 8 bytes counts as 8 one-byte strings

// What is known about the strings a node matches.
struct Info {
  std::optional<Set> exact;     // all of them, when few and short
  std::optional<Set> required;  // a set one of which is a substring of each, when known
};

size_t Score(const Set& s) {
  if (s.empty()) return 0;
  size_t shortest = SIZE_MAX;
  for (const auto& x : s) shortest = std::min(shortest, x.size());
  return shortest;
}

// Keeps the better of two necessary sets: longer shortest string, then fewer strings.
void Consider(std::optional<Set>* best, const Set& candidate) {
  const size_t score = Score(candidate);
  if (score == 0) return;
  if (!*best || score > Score(**best) ||
      (score == Score(**best) && candidate.size() < (*best)->size())) {
    *best = candidate;
  }
}

std::optional<Set> Factor(const Info& info) {
  std::optional<Set> best = info.required;
  if (info.exact) Consider(&best, *info.exact);
  return best;
}

std::optional<Set> Cross(const Set& a, const Set& b) {
  if (a.size() * b.size() > kMaxStrings) return std::nullopt;
  Set out;
  for (const auto& x : a) {
    for (const auto& y : b) {
      if (x.size() + y.size() > kMaxLength) return std::nullopt;
      out.insert(x + y);
    }
  }
  return out;
}

Info Analyze(const PatternNode& n) {
  switch (n.kind) {
    case Kind::kEmpty:
    case Kind::kAssert:
      return {Set{""}, std::nullopt};
    case Kind::kBytes: {
      Set bytes;
      for (unsigned b = 0; b < 256 && bytes.size() <= kMaxClassExpansion; ++b) {
        if (n.bytes.Has(static_cast<uint8_t>(b)))
          bytes.insert(std::string(1, static_cast<char>(b)));
      }
      if (bytes.size() > kMaxClassExpansion) return {};
      return {bytes, std::nullopt};
    }
    case Kind::kConcat: {
      // Consecutive children with exact sets join into longer strings (a "run");
      // every match contains a string of each run and each child's required set.
      std::optional<Set> best;
      Set run{""};
      bool all_joined = true;
      for (const auto& child : n.children) {
        const Info ci = Analyze(child);
        std::optional<Set> joined = ci.exact ? Cross(run, *ci.exact) : std::nullopt;
        if (joined) {
          run = std::move(*joined);
          continue;
        }
        all_joined = false;
        Consider(&best, run);
        if (ci.required) Consider(&best, *ci.required);
        run = ci.exact ? *ci.exact : Set{""};
      }
      Consider(&best, run);
      return {all_joined ? std::optional<Set>(run) : std::nullopt, best};
    }
    case Kind::kAlternate: {
      std::optional<Set> exact = Set{};
      std::optional<Set> required = Set{};
      for (const auto& child : n.children) {
        const Info ci = Analyze(child);
        if (exact && ci.exact && exact->size() + ci.exact->size() <= kMaxStrings) {
          exact->insert(ci.exact->begin(), ci.exact->end());
        } else {
          exact.reset();
        }
        // Each branch must contribute a necessary set, else a match may contain none.
        const std::optional<Set> f = Factor(ci);
        if (required && f && required->size() + f->size() <= kMaxStrings) {
          required->insert(f->begin(), f->end());
        } else {
          required.reset();
        }
      }
      return {exact, required};
    }
    case Kind::kRepeat: {
      const Info ci = Analyze(n.children[0]);
      if (n.min == 0) {
        if (n.max == 1 && ci.exact && ci.exact->size() < kMaxStrings) {
          Set e = *ci.exact;
          e.insert("");
          return {e, std::nullopt};
        }
        return {};
      }
      Info out;
      out.required = Factor(ci);  // at least one copy occurs
      if (n.min == n.max && ci.exact) {
        std::optional<Set> e = Set{""};
        for (uint32_t i = 0; i < n.min && e; ++i) e = Cross(*e, *ci.exact);
        out.exact = e;
      }
      return out;
    }
  }
  return {};
}

}  // namespace

std::optional<std::vector<std::string>> RequiredLiterals(const PatternNode& node) {
  const std::optional<Set> f = Factor(Analyze(node));
  if (!f || Score(*f) < kMinRequiredLiteral) return std::nullopt;
  return std::vector<std::string>(f->begin(), f->end());
}

}  // namespace kiln::broker
