#include "common/secrets/secrets_filter.hpp"

#include <algorithm>
#include <cassert>
#include <cstring>

namespace kiln::common {

namespace {

constexpr std::string_view kMask = "***";

// How JSON encoders (Python json.dumps(ensure_ascii=False), JavaScript JSON.stringify,
// nlohmann::json) write a string's bytes inside quotes.
std::string JsonEscaped(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += "\\u00";
          out += kHex[(c >> 4) & 0xf];
          out += kHex[c & 0xf];
        } else {
          out += c;
        }
    }
  }
  return out;
}

PatternResult Evaluate(uint8_t pattern, const PatternInput& in) {
  if (pattern < CredentialPatterns().size()) return CredentialPatterns()[pattern].match(in);
  return MatchPemEnd(in);
}

}  // namespace

// --- SecretsPolicy -----------------------------------------------------------------------------

StatusOr<std::shared_ptr<const SecretsPolicy>> SecretsPolicy::Create(
    const std::vector<std::string>& secrets, Patterns patterns) {
  std::vector<std::string> literals;
  size_t count = 0;
  for (size_t i = 0; i < secrets.size(); ++i) {
    const std::string& secret = secrets[i];
    if (secret.empty()) continue;
    // Never quote the secret itself in an error.
    if (secret.size() < kMinSecretBytes || secret.size() > kMaxSecretBytes) {
      return InvalidRequest("secret #" + std::to_string(i) + " is " +
                            std::to_string(secret.size()) + " bytes; secrets must be " +
                            std::to_string(kMinSecretBytes) + " to " +
                            std::to_string(kMaxSecretBytes) + " bytes");
    }
    literals.push_back(secret);
    ++count;
    std::string escaped = JsonEscaped(secret);
    if (escaped != secret) literals.push_back(std::move(escaped));
  }
  StatusOr<LiteralAutomaton> automaton = LiteralAutomaton::Build(literals);
  if (!automaton.ok()) return automaton.status().WithContext("secrets policy");

  std::shared_ptr<SecretsPolicy> policy(new SecretsPolicy());
  policy->literals_ = std::move(automaton).value();
  policy->secret_count_ = count;
  policy->patterns_ = patterns == Patterns::kBuiltIn;
  if (policy->patterns_) {
    std::span<const CredentialPattern> all = CredentialPatterns();
    assert(all.size() <= 16);
    for (size_t i = 0; i < all.size(); ++i) {
      const auto bit = static_cast<uint16_t>(1u << i);
      for (char c : all[i].firsts) policy->firsts_[static_cast<unsigned char>(c)] |= bit;
      for (char c : all[i].seconds) policy->seconds_[static_cast<unsigned char>(c)] |= bit;
      for (int b = 0; b < 256; ++b) {
        if (all[i].not_after != nullptr && all[i].not_after->Contains(b)) {
          policy->not_after_[b] |= bit;
        }
      }
    }
  }
  return std::shared_ptr<const SecretsPolicy>(std::move(policy));
}

std::string SecretsPolicy::Mask(std::string_view whole, uint32_t* count) const {
  // A non-owning pointer: the filter does not outlive this call.
  SecretsFilter filter(std::shared_ptr<const SecretsPolicy>(std::shared_ptr<const void>(), this));
  std::string out;
  out.reserve(whole.size());
  filter.Push(whole, &out);
  filter.Finish(&out);
  if (count != nullptr) *count += filter.redactions();
  return out;
}

size_t SecretsPolicy::max_pending_bytes() const {
  size_t literal = literals_.empty() ? 0 : literals_.max_literal_length() - 1;
  return std::max(literal, patterns_ ? kMaxPatternBytes : size_t{0});
}

// --- SecretsFilter -----------------------------------------------------------------------------

SecretsFilter::SecretsFilter(std::shared_ptr<const SecretsPolicy> policy)
    : policy_(std::move(policy)) {}

std::string SecretsFilter::Push(std::string_view chunk) {
  std::string out;
  Push(chunk, &out);
  return out;
}

std::string SecretsFilter::Finish() {
  std::string out;
  Finish(&out);
  return out;
}

void SecretsFilter::Push(std::string_view chunk, std::string* out) {
  assert(!finished_ && "Push after Finish");
  if (finished_ || chunk.empty()) return;
  const uint64_t from = pos_;
  buf_.append(chunk);
  pos_ += chunk.size();
  ScanLiterals(from);
  if (policy_->patterns_) {
    ScanPatterns(/*at_end=*/false);
  } else {
    pattern_next_ = pos_;
  }
  // A future literal match starts no earlier than the automaton's depth before the end.
  const LiteralAutomaton& literals = policy_->literals_;
  uint64_t safe = pos_;
  if (!literals.empty()) {
    safe -= std::min<uint64_t>(literals.depth(ac_state_), literals.max_literal_length() - 1);
  }
  Emit(std::min(safe, pattern_next_), out);
  Compact();
}

void SecretsFilter::Finish(std::string* out) {
  assert(!finished_ && "Finish called twice");
  if (finished_) return;
  finished_ = true;
  if (policy_->patterns_) ScanPatterns(/*at_end=*/true);
  if (in_block_) {
    // A private-key block without its END line: masked to the end of the stream.
    AddCover(block_begin_, pos_);
    in_block_ = false;
  }
  Emit(pos_, out);
  buf_.clear();
  buf_.shrink_to_fit();
  buf_start_ = pos_;
  cover_.clear();
}

void SecretsFilter::ScanLiterals(uint64_t from) {
  const LiteralAutomaton& ac = policy_->literals_;
  if (ac.empty()) return;
  const std::string_view text =
      std::string_view(buf_).substr(static_cast<size_t>(from - buf_start_));
  ac_state_ = ac.Scan(ac_state_, text, [&](size_t end, uint32_t length) {
    AddCover(from + end - length, from + end);
  });
}

void SecretsFilter::ScanPatterns(bool at_end) {
  const uint16_t* firsts = policy_->firsts_;
  const uint16_t* seconds = policy_->seconds_;
  const uint16_t* not_after = policy_->not_after_;
  while (true) {
    if (!waiting_.empty()) {
      if (!RunWaiting(at_end)) return;
      pattern_next_ = resume_;
    }
    if (pattern_next_ >= pos_) return;
    if (in_block_) {
      // Inside a private-key block only its END line matters, and it starts with '-'.
      const size_t off = static_cast<size_t>(pattern_next_ - buf_start_);
      const void* dash =
          std::memchr(buf_.data() + off, '-', static_cast<size_t>(pos_ - pattern_next_));
      const uint64_t at =
          dash == nullptr ? pos_ : buf_start_ + (static_cast<const char*>(dash) - buf_.data());
      AddCover(block_begin_, at);
      pattern_next_ = at;
      if (at == pos_) return;
      resume_ = at + 1;
      if (!RunPatterns(at, 0, at_end)) return;
      pattern_next_ = resume_;
      continue;
    }
    // Skip the bytes no pattern can start at (the prefilter only rules out sure non-matches,
    // so it does not change any result). buf_ holds the byte before any anchor but the first.
    const auto* data = reinterpret_cast<const unsigned char*>(buf_.data());
    size_t i = static_cast<size_t>(pattern_next_ - buf_start_);
    const size_t n = buf_.size();
    uint32_t candidates = 0;
    if (i == 0 && n > 0) {  // the first byte of the stream: no byte before it
      candidates = firsts[data[0]] & (n > 1 ? seconds[data[1]] : 0xffff);
      if (candidates == 0) ++i;
    }
    if (candidates == 0) {
      // Branch-free per byte; the rare candidate ends the loop.
      for (; i + 1 < n; ++i) {
        candidates = firsts[data[i]] & seconds[data[i + 1]] & ~not_after[data[i - 1]];
        if (candidates != 0) break;
      }
      if (candidates == 0 && i + 1 == n) {  // the last byte: its second byte is still unknown
        candidates = firsts[data[i]] & ~not_after[data[i - 1]];
        if (candidates == 0) ++i;
      }
    }
    pattern_next_ = buf_start_ + i;
    if (i == n) return;
    resume_ = pattern_next_ + 1;
    if (!RunPatterns(pattern_next_, candidates, at_end)) return;
    pattern_next_ = resume_;
  }
}

PatternInput SecretsFilter::InputAt(uint64_t at, bool at_end) const {
  const size_t off = static_cast<size_t>(at - buf_start_);
  return {.text = std::string_view(buf_).substr(off),
          .at_end = at_end,
          .prev = at == 0 ? -1 : static_cast<int>(ByteAt(at - 1))};
}

bool SecretsFilter::RunPatterns(uint64_t at, uint32_t mask, bool at_end) {
  const PatternInput in = InputAt(at, at_end);
  auto run = [&](uint8_t pattern) {
    PatternResult r = Evaluate(pattern, in);
    if (r.verdict == Verdict::kNeedMore) {
      waiting_.push_back({pattern, r.run, at + r.decide_at, pos_});
    } else {
      Apply(at, pattern, r);
    }
  };
  if (in_block_) {
    run(kPemEnd);
  } else {
    for (uint8_t i = 0; mask != 0; ++i, mask >>= 1) {
      if (mask & 1) run(i);
    }
  }
  return waiting_.empty();
}

bool SecretsFilter::RunWaiting(bool at_end) {
  const uint64_t at = pattern_next_;
  const PatternInput in = InputAt(at, at_end);
  size_t kept = 0;
  for (size_t i = 0; i < waiting_.size(); ++i) {
    Waiting w = waiting_[i];
    if (!at_end && !ShouldRerun(w)) {
      waiting_[kept++] = w;
      continue;
    }
    PatternResult r = Evaluate(w.pattern, in);
    if (r.verdict == Verdict::kNeedMore) {
      waiting_[kept++] = {w.pattern, r.run, at + r.decide_at, pos_};
    } else {
      Apply(at, w.pattern, r);
    }
  }
  waiting_.resize(kept);
  return waiting_.empty();
}

bool SecretsFilter::ShouldRerun(Waiting& w) const {
  if (w.run == nullptr || pos_ >= w.decide_at) return true;
  for (uint64_t p = w.checked; p < pos_; ++p) {
    if (!w.run->Contains(ByteAt(p))) return true;
  }
  w.checked = pos_;
  return false;
}

void SecretsFilter::Apply(uint64_t at, uint8_t pattern, const PatternResult& r) {
  if (r.verdict != Verdict::kMatch) return;
  if (pattern == kPemEnd) {
    AddCover(block_begin_, at + r.mask_end);
    in_block_ = false;
    resume_ = at + r.mask_end;
    return;
  }
  AddCover(at + r.mask_begin, at + r.mask_end);
  if (r.opens_block) {
    in_block_ = true;
    block_begin_ = at + r.mask_begin;
    resume_ = at + r.mask_end;
  }
}

void SecretsFilter::AddCover(uint64_t begin, uint64_t end) {
  if (begin >= end) return;
  if (cover_.empty() || begin >= cover_.back().end) {
    cover_.push_back({begin, end});
    return;
  }
  // Merge with every span that shares a byte with [begin, end).
  auto first = std::partition_point(cover_.begin(), cover_.end(),
                                    [begin](const Span& s) { return s.end <= begin; });
  if (first == cover_.end() || first->begin >= end) {
    cover_.insert(first, {begin, end});
    return;
  }
  auto last = first;
  uint64_t merged_end = end;
  while (last != cover_.end() && last->begin < end) {
    merged_end = std::max(merged_end, last->end);
    ++last;
  }
  first->begin = std::min(first->begin, begin);
  first->end = merged_end;
  cover_.erase(first + 1, last);
}

void SecretsFilter::Emit(uint64_t upto, std::string* out) {
  auto plain = [&](uint64_t to) {
    out->append(buf_, static_cast<size_t>(emitted_ - buf_start_),
                static_cast<size_t>(to - emitted_));
    emitted_ = to;
  };
  while (emitted_ < upto) {
    if (cover_.empty() || cover_.front().begin >= upto) {
      plain(upto);
      return;
    }
    const Span span = cover_.front();
    if (span.begin > emitted_) plain(span.begin);
    if (span.begin == emitted_) {
      out->append(kMask);
      ++redactions_;
    }
    emitted_ = std::min(span.end, upto);
    if (span.end <= upto) cover_.pop_front();
  }
}

void SecretsFilter::Compact() {
  // Keep the byte before emitted_: patterns look at the byte before their anchor.
  const uint64_t keep = emitted_ == 0 ? 0 : emitted_ - 1;
  const size_t drop = static_cast<size_t>(keep - buf_start_);
  if (drop >= 4096 && drop >= buf_.size() / 2) {
    buf_.erase(0, drop);
    buf_start_ = keep;
  }
}

}  // namespace kiln::common
