#include "broker/policy/pattern_set.hpp"

#include <algorithm>
#include <utility>

#include "broker/policy/required_literals.hpp"

namespace kiln::broker {
namespace {

bool IsWordByte(int b) {
  return (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9') || b == '_';
}
bool IsLineBreak(int b) { return b == '\n' || b == '\r'; }

// A set of program counters with O(1) insert, lookup and clear (Briggs & Torczon).
class SparseSet {
 public:
  explicit SparseSet(size_t capacity) : dense_(capacity), sparse_(capacity) {}
  bool Contains(uint32_t v) const {
    const uint32_t s = sparse_[v];
    return s < size_ && dense_[s] == v;
  }
  void Insert(uint32_t v) {
    sparse_[v] = size_;
    dense_[size_++] = v;
  }
  void Clear() { size_ = 0; }
  bool empty() const { return size_ == 0; }
  uint32_t size() const { return size_; }
  uint32_t operator[](uint32_t i) const { return dense_[i]; }

 private:
  std::vector<uint32_t> dense_;
  std::vector<uint32_t> sparse_;
  uint32_t size_ = 0;
};

}  // namespace

// Thompson construction from a PatternNode tree; appends to the set's program.
class PatternSet::Compiler {
 public:
  explicit Compiler(PatternSet* set) : set_(set) {}

  common::Status Emit(const PatternNode& n) {
    using Kind = PatternNode::Kind;
    switch (n.kind) {
      case Kind::kEmpty:
        return common::Status::Ok();
      case Kind::kBytes:
        set_->classes_.push_back(n.bytes);
        return Push({Op::kByte, {}, static_cast<uint32_t>(set_->classes_.size() - 1), 0});
      case Kind::kAssert:
        return Push({Op::kAssert, n.assertion, 0, 0});
      case Kind::kConcat:
        for (const auto& c : n.children) RETURN_IF_ERROR(Emit(c));
        return common::Status::Ok();
      case Kind::kAlternate:
        return EmitAlternate(n);
      case Kind::kRepeat:
        return EmitRepeat(n);
    }
    return common::Internal("unknown pattern node");
  }

  common::Status Push(Inst inst) {
    if (set_->program_.size() >= kMaxInstructions) {
      return common::InvalidRequest("patterns too large (more than " +
                                    std::to_string(kMaxInstructions) + " instructions)");
    }
    set_->program_.push_back(inst);
    return common::Status::Ok();
  }
  uint32_t Here() const { return static_cast<uint32_t>(set_->program_.size()); }

 private:
  //   split L1, next1; L1: a; jmp end; next1: split L2, next2; L2: b; jmp end; next2: c; end:
  common::Status EmitAlternate(const PatternNode& n) {
    std::vector<uint32_t> jumps;
    for (size_t i = 0; i < n.children.size(); ++i) {
      if (i + 1 == n.children.size()) {
        RETURN_IF_ERROR(Emit(n.children[i]));
        break;
      }
      const uint32_t split = Here();
      RETURN_IF_ERROR(Push({Op::kSplit, {}, split + 1, 0}));
      RETURN_IF_ERROR(Emit(n.children[i]));
      jumps.push_back(Here());
      RETURN_IF_ERROR(Push({Op::kJump, {}, 0, 0}));
      set_->program_[split].y = Here();
    }
    for (uint32_t j : jumps) set_->program_[j].x = Here();
    return common::Status::Ok();
  }

  // e{n,m}: n copies of e, then m-n optional copies (each skip jumps to the end);
  // e{n,}: n copies, then   loop: split body, end; body: e; jmp loop; end:
  common::Status EmitRepeat(const PatternNode& n) {
    const PatternNode& body = n.children[0];
    for (uint32_t i = 0; i < n.min; ++i) RETURN_IF_ERROR(Emit(body));
    if (n.max == PatternNode::kUnbounded) {
      const uint32_t loop = Here();
      RETURN_IF_ERROR(Push({Op::kSplit, {}, loop + 1, 0}));
      RETURN_IF_ERROR(Emit(body));
      RETURN_IF_ERROR(Push({Op::kJump, {}, loop, 0}));
      set_->program_[loop].y = Here();
      return common::Status::Ok();
    }
    std::vector<uint32_t> skips;
    for (uint32_t i = n.min; i < n.max; ++i) {
      skips.push_back(Here());
      RETURN_IF_ERROR(Push({Op::kSplit, {}, Here() + 1, 0}));
      RETURN_IF_ERROR(Emit(body));
    }
    for (uint32_t s : skips) set_->program_[s].y = Here();
    return common::Status::Ok();
  }

  PatternSet* set_;
};

common::Status PatternSet::Add(Compiler* compiler, std::string_view pattern,
                               std::optional<std::vector<std::string>>* literals) {
  ASSIGN_OR_RETURN(PatternNode tree, ParsePattern(pattern));
  if (CanMatchEmpty(tree)) {
    return common::InvalidRequest("can match an empty string, so it would match any code");
  }
  const auto index = static_cast<uint32_t>(starts_.size());
  starts_.push_back(compiler->Here());
  RETURN_IF_ERROR(compiler->Emit(tree));
  RETURN_IF_ERROR(compiler->Push({Op::kMatch, {}, index, 0}));
  owner_.resize(program_.size(), index);
  *literals = RequiredLiterals(tree);
  return common::Status::Ok();
}

common::Status PatternSet::Check(std::string_view pattern) {
  PatternSet set;
  Compiler compiler(&set);
  std::optional<std::vector<std::string>> literals;
  return set.Add(&compiler, pattern, &literals);
}

common::StatusOr<PatternSet> PatternSet::Compile(const std::vector<std::string>& patterns) {
  PatternSet set;
  Compiler compiler(&set);
  std::vector<std::optional<std::vector<std::string>>> literals(patterns.size());
  for (size_t i = 0; i < patterns.size(); ++i) {
    common::Status st = set.Add(&compiler, patterns[i], &literals[i]);
    if (!st.ok()) return st.WithContext("pattern " + std::to_string(i));
  }
  set.IndexStarts();
  RETURN_IF_ERROR(set.BuildPrefilter(literals));
  return set;
}

common::Status PatternSet::BuildPrefilter(
    const std::vector<std::optional<std::vector<std::string>>>& literals) {
  gates_.assign(literals.size(), {});
  std::vector<std::string> texts;
  for (size_t p = 0; p < literals.size(); ++p) {
    if (!literals[p]) continue;
    for (const std::string& lit : *literals[p]) {
      auto [it, added] = literal_ids_.emplace(lit, static_cast<uint32_t>(texts.size()));
      if (added) texts.push_back(lit);
      gates_[p].push_back(it->second);
    }
  }
  if (texts.empty()) return common::Status::Ok();
  suffixes_.assign(texts.size(), {});
  for (uint32_t a = 0; a < texts.size(); ++a) {
    for (uint32_t b = 0; b < texts.size(); ++b) {
      if (texts[a].ends_with(texts[b])) suffixes_[a].push_back(b);
    }
  }
  auto automaton = common::LiteralAutomaton::Build(texts);
  if (!automaton.ok()) return automaton.status().WithContext("building the literal prefilter");
  literals_ = std::move(automaton).value();
  return common::Status::Ok();
}

std::vector<bool> PatternSet::Candidates(std::string_view text) const {
  std::vector<bool> run(starts_.size(), true);
  if (literal_ids_.empty()) return run;
  std::vector<bool> present(suffixes_.size());
  literals_.Scan(common::LiteralAutomaton::kStart, text, [&](size_t end, uint32_t length) {
    auto it = literal_ids_.find(text.substr(end - length, length));
    if (it == literal_ids_.end()) return;  // cannot happen: the automaton only knows these
    for (uint32_t s : suffixes_[it->second]) present[s] = true;
  });
  for (size_t p = 0; p < gates_.size(); ++p) {
    if (gates_[p].empty()) continue;
    run[p] =
        std::any_of(gates_[p].begin(), gates_[p].end(), [&](uint32_t l) { return present[l]; });
  }
  return run;
}

void PatternSet::IndexStarts() {
  // Bytes that can begin each pattern: the byte classes reachable from its start
  // without consuming input (assertions assumed to hold: a superset is safe).
  std::array<std::vector<uint32_t>, 256> by_byte;
  std::vector<bool> seen(program_.size());
  std::vector<uint32_t> stack;
  for (uint32_t p = 0; p < starts_.size(); ++p) {
    ByteClass first;
    std::fill(seen.begin(), seen.end(), false);
    stack.assign(1, starts_[p]);
    while (!stack.empty()) {
      const uint32_t pc = stack.back();
      stack.pop_back();
      if (seen[pc]) continue;
      seen[pc] = true;
      const Inst& in = program_[pc];
      switch (in.op) {
        case Op::kByte:
          first.Merge(classes_[in.x]);
          break;
        case Op::kSplit:
          stack.push_back(in.x);
          stack.push_back(in.y);
          break;
        case Op::kJump:
          stack.push_back(in.x);
          break;
        case Op::kAssert:
          stack.push_back(pc + 1);
          break;
        case Op::kMatch:
          break;
      }
    }
    for (unsigned b = 0; b < 256; ++b) {
      if (first.Has(static_cast<uint8_t>(b))) by_byte[b].push_back(p);
    }
  }
  for (unsigned b = 0; b < 256; ++b) {
    starter_begin_[b] = static_cast<uint32_t>(starter_ids_.size());
    starter_ids_.insert(starter_ids_.end(), by_byte[b].begin(), by_byte[b].end());
  }
  starter_begin_[256] = static_cast<uint32_t>(starter_ids_.size());
}

// One simulation over one text.
class PatternSet::Run {
 public:
  // Only patterns with candidate[p] run; the others are reported as absent.
  Run(const PatternSet& set, std::string_view text, std::vector<bool> candidate)
      : set_(set),
        text_(text),
        current_(set.program_.size()),
        next_(set.program_.size()),
        matched_(set.starts_.size()),
        skip_(std::move(candidate)),
        remaining_(static_cast<size_t>(std::count(skip_.begin(), skip_.end(), true))) {
    skip_.flip();
  }

  std::vector<bool> Go() {
    const auto* bytes = reinterpret_cast<const uint8_t*>(text_.data());
    for (size_t pos = 0; pos < text_.size() && remaining_ > 0; ++pos) {
      const uint8_t b = bytes[pos];
      for (uint32_t i = set_.starter_begin_[b]; i < set_.starter_begin_[b + 1]; ++i) {
        const uint32_t p = set_.starter_ids_[i];
        if (!matched_[p] && !skip_[p]) Add(&current_, set_.starts_[p], pos);
      }
      if (current_.empty()) continue;
      next_.Clear();
      for (uint32_t i = 0; i < current_.size(); ++i) {
        const uint32_t pc = current_[i];
        const Inst& in = set_.program_[pc];
        if (in.op != Op::kByte || matched_[set_.owner_[pc]]) continue;
        if (set_.classes_[in.x].Has(b)) Add(&next_, pc + 1, pos + 1);
      }
      std::swap(current_, next_);
    }
    return std::move(matched_);
  }

 private:
  // Adds pc and everything reachable from it without consuming a byte at `pos`.
  void Add(SparseSet* list, uint32_t pc0, size_t pos) {
    stack_.assign(1, pc0);
    while (!stack_.empty()) {
      const uint32_t pc = stack_.back();
      stack_.pop_back();
      if (list->Contains(pc)) continue;
      list->Insert(pc);
      const Inst& in = set_.program_[pc];
      switch (in.op) {
        case Op::kByte:
          break;
        case Op::kSplit:
          stack_.push_back(in.y);
          stack_.push_back(in.x);
          break;
        case Op::kJump:
          stack_.push_back(in.x);
          break;
        case Op::kAssert:
          if (Holds(in.assertion, pos)) stack_.push_back(pc + 1);
          break;
        case Op::kMatch:
          if (!matched_[in.x]) {
            matched_[in.x] = true;
            --remaining_;
          }
          break;
      }
    }
  }

  bool Holds(PatternAssert a, size_t pos) const {
    const int before = pos > 0 ? static_cast<uint8_t>(text_[pos - 1]) : -1;
    const int after = pos < text_.size() ? static_cast<uint8_t>(text_[pos]) : -1;
    switch (a) {
      case PatternAssert::kLineStart:
        return before < 0 || IsLineBreak(before);
      case PatternAssert::kLineEnd:
        return after < 0 || IsLineBreak(after);
      case PatternAssert::kWordBoundary:
        return IsWordByte(before) != IsWordByte(after);
      case PatternAssert::kNotWordBoundary:
        return IsWordByte(before) == IsWordByte(after);
    }
    return false;
  }

  const PatternSet& set_;
  std::string_view text_;
  SparseSet current_;
  SparseSet next_;
  std::vector<uint32_t> stack_;
  std::vector<bool> matched_;
  std::vector<bool> skip_;  // not a candidate: never started
  size_t remaining_;
};

std::vector<bool> PatternSet::Match(std::string_view text) const {
  if (starts_.empty()) return {};
  return Run(*this, text, Candidates(text)).Go();
}

}  // namespace kiln::broker
