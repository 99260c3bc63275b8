#include "worker/runtimes/python_imports.hpp"

#include <algorithm>

namespace kiln::worker::runtimes {
namespace {

bool IsIdentChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         static_cast<unsigned char>(c) >= 0x80;  // non-ASCII identifiers
}

bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\f'; }

// Whether a statement may start at `pos`: only blanks back to the line's
// start, or a `;` / `:` before them.
bool AtStatementStart(std::string_view code, size_t pos) {
  while (pos > 0 && IsBlank(code[pos - 1])) --pos;
  return pos == 0 || code[pos - 1] == '\n' || code[pos - 1] == '\r' || code[pos - 1] == ';' ||
         code[pos - 1] == ':';
}

// Whether the word `word` stands at `pos` on its own (not inside a longer name).
bool WordAt(std::string_view code, size_t pos, std::string_view word) {
  if (code.substr(pos, word.size()) != word) return false;
  if (pos > 0 && (IsIdentChar(code[pos - 1]) || code[pos - 1] == '.')) return false;
  const size_t end = pos + word.size();
  return end == code.size() || !IsIdentChar(code[end]);
}

size_t SkipBlanks(std::string_view code, size_t pos) {
  // A backslash-newline continues the statement.
  while (pos < code.size()) {
    if (IsBlank(code[pos])) {
      ++pos;
    } else if (code[pos] == '\\' && pos + 1 < code.size() && code[pos + 1] == '\n') {
      pos += 2;
    } else {
      break;
    }
  }
  return pos;
}

// A dotted name at `pos`: its first component, and where the name ends.
std::string_view DottedName(std::string_view code, size_t pos, size_t* end) {
  size_t first_end = pos;
  while (first_end < code.size() && IsIdentChar(code[first_end])) ++first_end;
  size_t p = first_end;
  while (p < code.size()) {
    size_t q = SkipBlanks(code, p);
    if (q >= code.size() || code[q] != '.') break;
    q = SkipBlanks(code, q + 1);
    size_t r = q;
    while (r < code.size() && IsIdentChar(code[r])) ++r;
    if (r == q) break;
    p = r;
  }
  *end = p;
  return code.substr(pos, first_end - pos);
}

// `import a.b as c, d`: every first component, from just after `import`,
// to `visit`; where the list ends, or npos once `visit` said stop.
template <typename Visit>
size_t ImportList(std::string_view code, size_t pos, const Visit& visit) {
  for (;;) {
    pos = SkipBlanks(code, pos);
    size_t end = pos;
    std::string_view top = DottedName(code, pos, &end);
    if (top.empty()) return pos;
    if (!visit(top)) return std::string_view::npos;
    pos = SkipBlanks(code, end);
    if (WordAt(code, pos, "as")) {
      pos = SkipBlanks(code, pos + 2);
      while (pos < code.size() && IsIdentChar(code[pos])) ++pos;
      pos = SkipBlanks(code, pos);
    }
    if (pos >= code.size() || code[pos] != ',') return pos;
    ++pos;
  }
}

// Every statement's top-level modules, in order, to `visit` (false: stop).
// Linear in the code: the scan goes on after each statement it read, so no
// text is read twice (a continued line must not start a second pass over
// the rest of a hostile job's code).
template <typename Visit>
void ForEachImport(std::string_view code, const Visit& visit) {
  size_t pos = 0;
  while (pos < code.size()) {
    const char c = code[pos];
    size_t next = pos + 1;
    if (c == 'i' && WordAt(code, pos, "import") && AtStatementStart(code, pos)) {
      next = ImportList(code, pos + 6, visit);
    } else if (c == 'f' && WordAt(code, pos, "from") && AtStatementStart(code, pos)) {
      size_t p = SkipBlanks(code, pos + 4);
      if (p < code.size() && code[p] != '.') {  // relative imports name no module
        std::string_view top = DottedName(code, p, &next);
        if (!top.empty() && !visit(top)) return;
      }
      next = std::max(next, pos + 4);
    }
    if (next == std::string_view::npos) return;
    pos = std::max(next, pos + 1);
  }
}

}  // namespace

std::vector<std::string_view> StaticImports(std::string_view code) {
  std::vector<std::string_view> out;
  ForEachImport(code, [&](std::string_view top) {
    out.push_back(top);
    return true;
  });
  return out;
}

bool MayImportBeyond(std::string_view code, const ModuleSet& known) {
  if (code.find("__import__") != std::string_view::npos ||
      code.find("import_module") != std::string_view::npos) {
    return true;
  }
  bool beyond = false;
  ForEachImport(code, [&](std::string_view top) {
    beyond = known.find(top) == known.end();
    return !beyond;
  });
  return beyond;
}

}  // namespace kiln::worker::runtimes
