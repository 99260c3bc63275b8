// The built-in credential patterns of the secrets filter (cloud keys, API tokens, bearer tokens,
// JWTs, passwords in connection strings, PEM private-key blocks), as hand-written anchored
// matchers. SecretsFilter runs a pattern only at positions that pass its cheap prefilter
// (first two bytes and the byte before), so ordinary text costs a few table lookups per byte;
// no regex engine is involved.
//
//   const CredentialPattern& p = CredentialPatterns()[i];
//   PatternResult r = p.match({.text = rest_of_stream, .at_end = false, .prev = previous_byte});
//
// Stateless; any thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace kiln::common {

// A set of bytes, usable in constant expressions.
struct ByteSet {
  std::array<bool, 256> has{};
  bool Contains(unsigned char b) const { return has[b]; }
};

enum class Verdict : uint8_t { kNoMatch, kMatch, kNeedMore };

// What a matcher says about the text starting at its anchor.
struct PatternResult {
  Verdict verdict = Verdict::kNoMatch;
  // kMatch: the bytes to mask, relative to the anchor (e.g. only the password of a URL).
  uint32_t mask_begin = 0;
  uint32_t mask_end = 0;
  // kMatch of a PEM BEGIN line: everything after it is masked too, up to its END line.
  bool opens_block = false;
  // kNeedMore: the verdict cannot change while every further byte is in `run` and fewer than
  // `decide_at` bytes (from the anchor) are available; nullptr: it may change with any byte.
  const ByteSet* run = nullptr;
  uint32_t decide_at = 0;
};

struct PatternInput {
  std::string_view text;  // from the anchor to the end of what has arrived so far
  bool at_end = false;    // no more bytes will come
  int prev = -1;          // the byte before the anchor, -1 at the start of the stream
};

struct CredentialPattern {
  std::string_view name;
  // A cheap necessary condition, checked before `match` is called: the first byte is one of
  // `firsts`, the second one of `seconds`, and the byte before is not in `not_after`.
  std::string_view firsts;
  std::string_view seconds;
  const ByteSet* not_after;  // nullptr: any byte
  PatternResult (*match)(const PatternInput& in);
};

// Every matcher decides (kMatch or kNoMatch) once this many bytes from its anchor are available.
inline constexpr size_t kMaxPatternBytes = 12 * 1024;

// The patterns the filter looks for everywhere (the PEM END line is not among them).
std::span<const CredentialPattern> CredentialPatterns();
// The line that closes a PEM private-key block: "-----END ... PRIVATE KEY-----".
PatternResult MatchPemEnd(const PatternInput& in);

}  // namespace kiln::common
