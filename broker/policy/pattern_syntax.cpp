#include "broker/policy/pattern_syntax.hpp"

#include <algorithm>
#include <string>

namespace kiln::broker {
namespace {

using Kind = PatternNode::Kind;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAsciiAlnum(char c) { return IsDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
int HexValue(char c) {
  if (IsDigit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

ByteClass WordClass() {
  ByteClass c;
  c.AddRange('a', 'z');
  c.AddRange('A', 'Z');
  c.AddRange('0', '9');
  c.Add('_');
  return c;
}
ByteClass DigitClass() {
  ByteClass c;
  c.AddRange('0', '9');
  return c;
}
// ECMAScript \s restricted to single bytes (the Unicode spaces are multi-byte in UTF-8).
ByteClass SpaceClass() {
  ByteClass c;
  for (char s : {' ', '\t', '\n', '\v', '\f', '\r'}) c.Add(static_cast<uint8_t>(s));
  return c;
}
ByteClass Single(uint8_t b) {
  ByteClass c;
  c.Add(b);
  return c;
}

PatternNode BytesNode(ByteClass c) {
  PatternNode n;
  n.kind = Kind::kBytes;
  n.bytes = c;
  return n;
}

class Parser {
 public:
  explicit Parser(std::string_view p) : p_(p) {}

  common::StatusOr<PatternNode> Parse() {
    PatternNode root;
    RETURN_IF_ERROR(ParseAlternation(&root));
    if (i_ < p_.size()) return Error("unmatched )");
    return root;
  }

 private:
  common::Status Error(const std::string& what) const {
    return common::InvalidRequest("offset " + std::to_string(i_) + ": " + what);
  }
  bool AtEnd() const { return i_ >= p_.size(); }
  char Peek() const { return p_[i_]; }

  common::Status ParseAlternation(PatternNode* out) {
    PatternNode alt;
    alt.kind = Kind::kAlternate;
    while (true) {
      PatternNode branch;
      RETURN_IF_ERROR(ParseConcat(&branch));
      alt.children.push_back(std::move(branch));
      if (AtEnd() || Peek() != '|') break;
      ++i_;
    }
    *out = alt.children.size() == 1 ? std::move(alt.children[0]) : std::move(alt);
    return common::Status::Ok();
  }

  common::Status ParseConcat(PatternNode* out) {
    PatternNode cat;
    cat.kind = Kind::kConcat;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      PatternNode piece;
      RETURN_IF_ERROR(ParseRepeat(&piece));
      cat.children.push_back(std::move(piece));
    }
    if (cat.children.empty()) {
      *out = PatternNode{};  // kEmpty, e.g. one side of "a|"
    } else if (cat.children.size() == 1) {
      *out = std::move(cat.children[0]);
    } else {
      *out = std::move(cat);
    }
    return common::Status::Ok();
  }

  common::Status ParseRepeat(PatternNode* out) {
    PatternNode atom;
    RETURN_IF_ERROR(ParseAtom(&atom));
    if (AtEnd()) {
      *out = std::move(atom);
      return common::Status::Ok();
    }
    uint32_t min = 0;
    uint32_t max = 0;
    const char c = Peek();
    if (c == '*' || c == '+' || c == '?') {
      ++i_;
      min = c == '+' ? 1 : 0;
      max = c == '?' ? 1 : PatternNode::kUnbounded;
    } else if (c == '{') {
      RETURN_IF_ERROR(ParseCounts(&min, &max));
    } else {
      *out = std::move(atom);
      return common::Status::Ok();
    }
    if (atom.kind == Kind::kAssert || atom.kind == Kind::kEmpty) {
      return Error("nothing to repeat");
    }
    if (!AtEnd() && Peek() == '?') ++i_;  // lazy: same set of matches
    if (!AtEnd() && (Peek() == '*' || Peek() == '+' || Peek() == '?' || Peek() == '{')) {
      return Error("nothing to repeat");
    }
    PatternNode rep;
    rep.kind = Kind::kRepeat;
    rep.min = min;
    rep.max = max;
    rep.children.push_back(std::move(atom));
    *out = std::move(rep);
    return common::Status::Ok();
  }

  // At '{': "{n}", "{n,}" or "{n,m}".
  common::Status ParseCounts(uint32_t* min, uint32_t* max) {
    ++i_;
    auto number = [&](uint32_t* v) -> bool {
      size_t start = i_;
      uint64_t n = 0;
      while (!AtEnd() && IsDigit(Peek())) {
        n = std::min<uint64_t>(n * 10 + (p_[i_++] - '0'), uint64_t{kMaxRepeat} + 1);
      }
      if (i_ == start) return false;
      *v = static_cast<uint32_t>(n);
      return true;
    };
    if (!number(min)) return Error("bad repetition (write \\{ for a literal brace)");
    *max = *min;
    if (!AtEnd() && Peek() == ',') {
      ++i_;
      if (!number(max)) *max = PatternNode::kUnbounded;
    }
    if (AtEnd() || Peek() != '}') return Error("bad repetition (write \\{ for a literal brace)");
    ++i_;
    if (*min > kMaxRepeat || (*max != PatternNode::kUnbounded && *max > kMaxRepeat)) {
      return Error("repetition count above " + std::to_string(kMaxRepeat));
    }
    if (*max < *min) return Error("repetition {n,m} with m < n");
    return common::Status::Ok();
  }

  common::Status ParseAtom(PatternNode* out) {
    const char c = Peek();
    switch (c) {
      case '(':
        return ParseGroup(out);
      case '[':
        return ParseClass(out);
      case '.': {
        ++i_;
        ByteClass any;
        any.Add('\n');
        any.Add('\r');
        any.Invert();
        *out = BytesNode(any);
        return common::Status::Ok();
      }
      case '^':
      case '$':
        ++i_;
        out->kind = Kind::kAssert;
        out->assertion = c == '^' ? PatternAssert::kLineStart : PatternAssert::kLineEnd;
        return common::Status::Ok();
      case '\\':
        return ParseEscape(out);
      case '*':
      case '+':
      case '?':
      case '{':
        return Error("nothing to repeat");
      default:
        ++i_;
        *out = BytesNode(Single(static_cast<uint8_t>(c)));
        return common::Status::Ok();
    }
  }

  common::Status ParseGroup(PatternNode* out) {
    ++i_;  // '('
    if (!AtEnd() && Peek() == '?') {
      if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
        i_ += 2;
      } else {
        return Error("lookaround and named groups are not supported (only (?:...))");
      }
    }
    if (++depth_ > kMaxDepth)
      return Error("groups nested deeper than " + std::to_string(kMaxDepth));
    RETURN_IF_ERROR(ParseAlternation(out));
    --depth_;
    if (AtEnd() || Peek() != ')') return Error("missing )");
    ++i_;
    return common::Status::Ok();
  }

  // After a backslash outside a class.
  common::Status ParseEscape(PatternNode* out) {
    ++i_;
    if (AtEnd()) return Error("trailing backslash");
    const char c = Peek();
    if (c == 'b' || c == 'B') {
      ++i_;
      out->kind = Kind::kAssert;
      out->assertion = c == 'b' ? PatternAssert::kWordBoundary : PatternAssert::kNotWordBoundary;
      return common::Status::Ok();
    }
    ByteClass cls;
    RETURN_IF_ERROR(ParseEscapedClass(&cls, /*in_class=*/false));
    *out = BytesNode(cls);
    return common::Status::Ok();
  }

  // The escape at i_ (after its backslash), as a set of bytes; `\b` is a backspace in a class.
  common::Status ParseEscapedClass(ByteClass* out, bool in_class) {
    const char c = p_[i_];
    ByteClass cls;
    switch (c) {
      case 'd':
      case 'D':
        cls = DigitClass();
        break;
      case 'w':
      case 'W':
        cls = WordClass();
        break;
      case 's':
      case 'S':
        cls = SpaceClass();
        break;
      case 'n':
        cls = Single('\n');
        break;
      case 'r':
        cls = Single('\r');
        break;
      case 't':
        cls = Single('\t');
        break;
      case 'f':
        cls = Single('\f');
        break;
      case 'v':
        cls = Single('\v');
        break;
      case 'b':
        if (!in_class) return Error("internal: \\b outside a class");
        cls = Single('\b');
        break;
      case '0':
        if (i_ + 1 < p_.size() && IsDigit(p_[i_ + 1]))
          return Error("octal escapes are not supported");
        cls = Single(0);
        break;
      case 'x': {
        int hi = i_ + 1 < p_.size() ? HexValue(p_[i_ + 1]) : -1;
        int lo = i_ + 2 < p_.size() ? HexValue(p_[i_ + 2]) : -1;
        if (hi < 0 || lo < 0) return Error("\\x needs two hex digits");
        cls = Single(static_cast<uint8_t>(hi * 16 + lo));
        i_ += 2;
        break;
      }
      default:
        if (IsDigit(c)) return Error("back-references are not supported");
        if (IsAsciiAlnum(c)) return Error(std::string("unsupported escape \\") + c);
        cls = Single(static_cast<uint8_t>(c));  // escaped punctuation (or a byte) is literal
    }
    if (c == 'D' || c == 'W' || c == 'S') cls.Invert();
    ++i_;
    *out = cls;
    return common::Status::Ok();
  }

  common::Status ParseClass(PatternNode* out) {
    ++i_;  // '['
    bool negate = false;
    if (!AtEnd() && Peek() == '^') {
      negate = true;
      ++i_;
    }
    if (!AtEnd() && Peek() == ']') return Error("empty class");
    ByteClass cls;
    while (true) {
      if (AtEnd()) return Error("missing ]");
      if (Peek() == ']') break;
      ByteClass lo_cls;
      int lo = -1;
      RETURN_IF_ERROR(ParseClassAtom(&lo_cls, &lo));
      if (!AtEnd() && Peek() == '-' && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
        ++i_;
        ByteClass hi_cls;
        int hi = -1;
        RETURN_IF_ERROR(ParseClassAtom(&hi_cls, &hi));
        if (lo < 0 || hi < 0) return Error("a class shorthand cannot bound a range");
        if (hi < lo) return Error("range out of order");
        cls.AddRange(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi));
      } else {
        cls.Merge(lo_cls);
      }
    }
    ++i_;  // ']'
    if (negate) cls.Invert();
    *out = BytesNode(cls);
    return common::Status::Ok();
  }

  // One member of a class; *single is its byte when it is one byte, else -1.
  common::Status ParseClassAtom(ByteClass* out, int* single) {
    const auto c = static_cast<unsigned char>(Peek());
    if (c >= 0x80) return Error("non-ASCII characters in a class are not supported");
    if (c != '\\') {
      ++i_;
      *out = Single(c);
      *single = c;
      return common::Status::Ok();
    }
    ++i_;
    if (AtEnd()) return Error("trailing backslash");
    const char e = Peek();
    RETURN_IF_ERROR(ParseEscapedClass(out, /*in_class=*/true));
    const bool shorthand = e == 'd' || e == 'D' || e == 'w' || e == 'W' || e == 's' || e == 'S';
    *single = -1;
    if (!shorthand) {
      for (unsigned b = 0; b < 256; ++b) {
        if (out->Has(static_cast<uint8_t>(b))) *single = static_cast<int>(b);
      }
    }
    return common::Status::Ok();
  }

  std::string_view p_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

common::StatusOr<PatternNode> ParsePattern(std::string_view pattern) {
  if (pattern.empty()) return common::InvalidRequest("empty pattern");
  if (pattern.size() > kMaxPatternBytes) {
    return common::InvalidRequest("pattern longer than " + std::to_string(kMaxPatternBytes) +
                                  " bytes");
  }
  return Parser(pattern).Parse();
}

bool CanMatchEmpty(const PatternNode& node) {
  switch (node.kind) {
    case Kind::kEmpty:
    case Kind::kAssert:
      return true;
    case Kind::kBytes:
      return false;
    case Kind::kConcat:
      for (const auto& c : node.children) {
        if (!CanMatchEmpty(c)) return false;
      }
      return true;
    case Kind::kAlternate:
      for (const auto& c : node.children) {
        if (CanMatchEmpty(c)) return true;
      }
      return false;
    case Kind::kRepeat:
      return node.min == 0 || CanMatchEmpty(node.children[0]);
  }
  return true;
}

}  // namespace kiln::broker
