// The streaming secrets filter: masks with "***" the secrets registered for a tenant and common
// credential patterns (cloud keys, API and bearer tokens, JWTs, passwords in connection
// strings, PEM private-key blocks) in everything a job's output carries off the worker: output
// chunks, final stdout/stderr, `result` and error messages (docs/secrets.md).
//
// A SecretsPolicy is built once per tenant from its secrets and shared. Each output stream of an
// execution gets its own SecretsFilter, which holds back only the bytes that could still be the
// start of a secret, so a secret split across any number of chunks is still masked:
//
//   ASSIGN_OR_RETURN(auto policy, SecretsPolicy::Create(tenant.secrets));
//   SecretsFilter out(policy);  send(out.Push(chunk)); ...; send(out.Finish());
//
// Semantics (identical for Push/Finish over any chunking and for SecretsPolicy::Mask): every
// occurrence of every registered secret and every pattern match is covered; each maximal run of
// overlapping covered bytes becomes one "***" and counts as one redaction.
//
// Thread-safety: a SecretsPolicy is immutable, any thread may use it. A SecretsFilter belongs to
// the one thread that pumps its stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/secrets/credential_patterns.hpp"
#include "common/secrets/literal_automaton.hpp"
#include "common/status.hpp"

namespace kiln::common {

class SecretsPolicy {
 public:
  // Shorter secrets are refused: masking them would corrupt ordinary output.
  static constexpr size_t kMinSecretBytes = 4;
  static constexpr size_t kMaxSecretBytes = 4096;

  enum class Patterns { kBuiltIn, kNone };

  // Empty secrets are ignored; INVALID_REQUEST for a secret shorter than kMinSecretBytes or
  // longer than kMaxSecretBytes, or secrets too large in all (LiteralAutomaton::kMaxTableCells).
  // Each secret is also matched in its JSON-escaped form when that differs (for `result`).
  static StatusOr<std::shared_ptr<const SecretsPolicy>> Create(
      const std::vector<std::string>& secrets, Patterns patterns = Patterns::kBuiltIn);

  // One-shot masking of a whole text (`result` JSON, an error message); adds the redactions to
  // *count when count is not null.
  std::string Mask(std::string_view whole, uint32_t* count = nullptr) const;

  // The most bytes a SecretsFilter on this policy holds back between calls.
  size_t max_pending_bytes() const;
  size_t secret_count() const { return secret_count_; }

 private:
  friend class SecretsFilter;
  SecretsPolicy() = default;

  LiteralAutomaton literals_;
  bool patterns_ = true;
  size_t secret_count_ = 0;
  // Prefilter, a bit per CredentialPatterns() entry: the patterns that can start with a byte,
  // have it second, or start after it.
  uint16_t firsts_[256] = {};
  uint16_t seconds_[256] = {};
  uint16_t not_after_[256] = {};
};

class SecretsFilter {
 public:
  explicit SecretsFilter(std::shared_ptr<const SecretsPolicy> policy);

  // Appends to *out the masked bytes that are safe to emit once `chunk` is added.
  void Push(std::string_view chunk, std::string* out);
  std::string Push(std::string_view chunk);
  // End of stream: appends the rest, masked. Push and Finish must not be called afterwards.
  void Finish(std::string* out);
  std::string Finish();

  // Masked regions so far (each "***" emitted counts one).
  uint32_t redactions() const { return redactions_; }
  // Bytes received but not yet emitted; never more than policy.max_pending_bytes().
  size_t pending_bytes() const { return static_cast<size_t>(pos_ - emitted_); }

 private:
  struct Span {
    uint64_t begin;
    uint64_t end;
  };
  // A pattern that needs more bytes at anchor pattern_next_.
  struct Waiting {
    uint8_t pattern;  // index in CredentialPatterns(), or kPemEnd
    const ByteSet* run;
    uint64_t decide_at;  // absolute
    uint64_t checked;    // absolute: bytes before this are known to be in `run`
  };
  static constexpr uint8_t kPemEnd = 0xff;

  unsigned char ByteAt(uint64_t abs) const {
    return static_cast<unsigned char>(buf_[static_cast<size_t>(abs - buf_start_)]);
  }
  void ScanLiterals(uint64_t from);
  void ScanPatterns(bool at_end);
  // Runs the patterns in `mask` (bits) at anchor `at`; returns whether all have decided.
  bool RunPatterns(uint64_t at, uint32_t mask, bool at_end);
  bool RunWaiting(bool at_end);
  PatternInput InputAt(uint64_t at, bool at_end) const;
  void Apply(uint64_t at, uint8_t pattern, const PatternResult& r);
  bool ShouldRerun(Waiting& w) const;
  void AddCover(uint64_t begin, uint64_t end);
  void Emit(uint64_t upto, std::string* out);
  void Compact();

  std::shared_ptr<const SecretsPolicy> policy_;
  std::string buf_;            // bytes [buf_start_, pos_); keeps one byte before emitted_
  uint64_t buf_start_ = 0;     // absolute offset of buf_[0]
  uint64_t pos_ = 0;           // bytes received
  uint64_t emitted_ = 0;       // bytes before this are emitted (or masked)
  uint64_t pattern_next_ = 0;  // patterns are decided for every anchor before this
  uint64_t resume_ = 0;        // where patterns continue once the anchor pattern_next_ decides
  uint32_t ac_state_ = LiteralAutomaton::kStart;
  std::deque<Span> cover_;  // disjoint, sorted; a span with begin < emitted_ is already "***"
  std::vector<Waiting> waiting_;
  bool in_block_ = false;  // inside a PEM private-key block
  uint64_t block_begin_ = 0;
  uint32_t redactions_ = 0;
  bool finished_ = false;
};

}  // namespace kiln::common
