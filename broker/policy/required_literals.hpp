// Required literals of a policy pattern: strings at least one of which occurs
// in every match. PatternSet looks for them first (one Aho-Corasick pass) and
// runs a pattern's NFA only when one occurs, so ordinary code, which contains
// none of "ctypes", "subprocess", "--no-preserve-root", ..., costs one table
// lookup per byte.
//
//   ASSIGN_OR_RETURN(PatternNode tree, ParsePattern(R"(\b(eval|exec)\s*\()"));
//   std::optional<std::vector<std::string>> lits = RequiredLiterals(tree);  // {"eval(", ...}
//
// nullopt when no set of strings of at least kMinRequiredLiteral bytes is
// necessary (e.g. "[a-z]+x"): such a pattern always runs. Correctness only
// needs the set to be necessary; longer strings just filter better.
// Pure function; any thread.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "broker/policy/pattern_syntax.hpp"

namespace kiln::broker {

inline constexpr size_t kMinRequiredLiteral = 2;

std::optional<std::vector<std::string>> RequiredLiterals(const PatternNode& node);

}  // namespace kiln::broker
