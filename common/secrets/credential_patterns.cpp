#include "common/secrets/credential_patterns.hpp"

#include <optional>

namespace kiln::common {

namespace {

constexpr ByteSet Bytes(std::string_view ranges) {
  // "a-zA-Z0-9_": single bytes and x-y ranges.
  ByteSet set;
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (i + 2 < ranges.size() && ranges[i + 1] == '-') {
      for (int b = static_cast<unsigned char>(ranges[i]);
           b <= static_cast<unsigned char>(ranges[i + 2]); ++b) {
        set.has[b] = true;
      }
      i += 2;
    } else {
      set.has[static_cast<unsigned char>(ranges[i])] = true;
    }
  }
  return set;
}

constexpr ByteSet Except(std::string_view bytes) {
  // Printable ASCII and every byte >= 0x80, minus `bytes`.
  ByteSet set;
  for (int b = 0x21; b < 256; ++b) set.has[b] = b != 0x7f;
  for (char c : bytes) set.has[static_cast<unsigned char>(c)] = false;
  return set;
}

constexpr ByteSet kWord = Bytes("A-Za-z0-9_");
constexpr ByteSet kWordDash = Bytes("A-Za-z0-9_-");
constexpr ByteSet kAlnum = Bytes("A-Za-z0-9");
constexpr ByteSet kUpperDigit = Bytes("A-Z0-9");
constexpr ByteSet kSlackBody = Bytes("A-Za-z0-9-");
constexpr ByteSet kBase64Url = Bytes("A-Za-z0-9_-");
constexpr ByteSet kAwsSecret = Bytes("A-Za-z0-9/+=");
constexpr ByteSet kBearerToken = Bytes("A-Za-z0-9._~+/-");
constexpr ByteSet kPadding = Bytes("=");
constexpr ByteSet kBlank = Bytes(" \t");
constexpr ByteSet kSpace = Bytes(" ");
constexpr ByteSet kQuote = Bytes("\"'");
constexpr ByteSet kSeparator = Bytes("=:");
constexpr ByteSet kPemLabel = Bytes("A-Z0-9 ");
// userinfo of a URL: no delimiters, quotes, brackets, whitespace or control bytes. The password
// run also takes ':' and '@' and ends at its last '@' (unencoded '@' in passwords is common).
constexpr ByteSet kUrlUser = Except(":/?#@\"'<>`\\");
constexpr ByteSet kUrlPassword = Except("/?#\"'<>`\\");

constexpr PatternResult kNo{};

PatternResult More(const ByteSet* run = nullptr, size_t decide_at = 0) {
  return {.verdict = Verdict::kNeedMore, .run = run, .decide_at = static_cast<uint32_t>(decide_at)};
}

PatternResult Match(size_t begin, size_t end) {
  return {.verdict = Verdict::kMatch,
          .mask_begin = static_cast<uint32_t>(begin),
          .mask_end = static_cast<uint32_t>(end)};
}

unsigned char At(const PatternInput& in, size_t i) {
  return static_cast<unsigned char>(in.text[i]);
}

unsigned char Lower(unsigned char c) { return c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c; }

// Each Expect* consumes from *pos on success and returns nullopt; otherwise it returns what the
// matcher must answer (no match, or need more bytes).
using Step = std::optional<PatternResult>;

Step ExpectLiteral(const PatternInput& in, size_t* pos, std::string_view lit,
                   bool fold_case = false) {
  for (char c : lit) {
    if (*pos >= in.text.size()) return in.at_end ? kNo : More();
    unsigned char got = fold_case ? Lower(At(in, *pos)) : At(in, *pos);
    if (got != static_cast<unsigned char>(c)) return kNo;
    ++*pos;
  }
  return std::nullopt;
}

// One of several literals of the same length.
Step ExpectOneOf(const PatternInput& in, size_t* pos,
                 std::initializer_list<std::string_view> lits) {
  bool more = false;
  for (std::string_view lit : lits) {
    size_t p = *pos;
    Step step = ExpectLiteral(in, &p, lit);
    if (!step) {
      *pos = p;
      return std::nullopt;
    }
    more |= step->verdict == Verdict::kNeedMore;
  }
  return more ? More() : kNo;
}

// A greedy run of bytes in `set`: at least `min`, at most `max`.
Step ExpectRun(const PatternInput& in, size_t* pos, const ByteSet& set, size_t min, size_t max) {
  const size_t start = *pos;
  while (*pos < in.text.size() && *pos - start < max && set.Contains(At(in, *pos))) ++*pos;
  if (*pos == in.text.size() && *pos - start < max && !in.at_end) return More(&set, start + max);
  if (*pos - start < min) return kNo;
  return std::nullopt;
}

// An optional byte of `set`.
Step ExpectOptional(const PatternInput& in, size_t* pos, const ByteSet& set) {
  if (*pos >= in.text.size()) return in.at_end ? std::nullopt : Step(More());
  if (set.Contains(At(in, *pos))) ++*pos;
  return std::nullopt;
}

bool InsideWord(const PatternInput& in, const ByteSet& word) {
  return in.prev >= 0 && word.Contains(static_cast<unsigned char>(in.prev));
}

#define KILN_EXPECT(expr)                             \
  do {                                                \
    if (Step kiln_step_ = (expr)) return *kiln_step_; \
  } while (0)

// AWS access key id: AKIA/ASIA + 16 of [A-Z0-9].
PatternResult AwsAccessKeyId(const PatternInput& in) {
  if (InsideWord(in, kAlnum)) return kNo;
  size_t pos = 0;
  KILN_EXPECT(ExpectOneOf(in, &pos, {"AKIA", "ASIA"}));
  KILN_EXPECT(ExpectRun(in, &pos, kUpperDigit, 16, 16));
  return Match(0, pos);
}

// aws_secret_access_key = <40 chars> (any case, '=' or ':', optional quotes): the value.
PatternResult AwsSecretAccessKey(const PatternInput& in) {
  if (InsideWord(in, kWord)) return kNo;
  size_t pos = 0;
  KILN_EXPECT(ExpectLiteral(in, &pos, "aws_secret_access_key", /*fold_case=*/true));
  KILN_EXPECT(ExpectOptional(in, &pos, kQuote));
  KILN_EXPECT(ExpectRun(in, &pos, kBlank, 0, 8));
  KILN_EXPECT(ExpectRun(in, &pos, kSeparator, 1, 1));
  KILN_EXPECT(ExpectRun(in, &pos, kBlank, 0, 8));
  KILN_EXPECT(ExpectOptional(in, &pos, kQuote));
  const size_t value = pos;
  KILN_EXPECT(ExpectRun(in, &pos, kAwsSecret, 16, 128));
  return Match(value, pos);
}

// GitHub tokens: ghp_/gho_/ghs_/ghu_/ghr_ + 30+ chars (36 today).
PatternResult GitHubToken(const PatternInput& in) {
  if (InsideWord(in, kWord)) return kNo;
  size_t pos = 0;
  KILN_EXPECT(ExpectOneOf(in, &pos, {"ghp_", "gho_", "ghs_", "ghu_", "ghr_"}));
  KILN_EXPECT(ExpectRun(in, &pos, kWord, 30, 255));
  return Match(0, pos);
}

// GitHub fine-grained tokens: github_pat_ + 20+ chars.
PatternResult GitHubPat(const PatternInput& in) {
  if (InsideWord(in, kWord)) return kNo;
  size_t pos = 0;
  KILN_EXPECT(ExpectLiteral(in, &pos, "github_pat_"));
  KILN_EXPECT(ExpectRun(in, &pos, kWord, 20, 255));
  return Match(0, pos);
}

// Slack tokens: xox[abpors]- + 10+ chars.
PatternResult SlackToken(const PatternInput& in) {
  if (InsideWord(in, kWord)) return kNo;
  size_t pos = 0;
  KILN_EXPECT(ExpectOneOf(in, &pos, {"xoxa-", "xoxb-", "xoxp-", "xoxo-", "xoxr-", "xoxs-"}));
  KILN_EXPECT(ExpectRun(in, &pos, kSlackBody, 10, 255));
  return Match(0, pos);
}

// OpenAI / Anthropic style keys: sk- + 20+ chars (sk-proj-..., sk-ant-api03-...).
PatternResult SkKey(const PatternInput& in) {
  if (InsideWord(in, kWordDash)) return kNo;
  size_t pos = 0;
  KILN_EXPECT(ExpectLiteral(in, &pos, "sk-"));
  KILN_EXPECT(ExpectRun(in, &pos, kWordDash, 20, 255));
  return Match(0, pos);
}

// Google API keys: AIza + 35 chars.
PatternResult GoogleApiKey(const PatternInput& in) {
  if (InsideWord(in, kWordDash)) return kNo;
  size_t pos = 0;
  KILN_EXPECT(ExpectLiteral(in, &pos, "AIza"));
  KILN_EXPECT(ExpectRun(in, &pos, kWordDash, 35, 64));
  return Match(0, pos);
}

// "Bearer <token>" (any case, so also "Authorization: Bearer <token>"): the token, 16+ chars.
PatternResult BearerToken(const PatternInput& in) {
  if (InsideWord(in, kWord)) return kNo;
  size_t pos = 0;
  KILN_EXPECT(ExpectLiteral(in, &pos, "bearer", /*fold_case=*/true));
  KILN_EXPECT(ExpectRun(in, &pos, kSpace, 1, 4));
  const size_t token = pos;
  KILN_EXPECT(ExpectRun(in, &pos, kBearerToken, 16, 8192));
  KILN_EXPECT(ExpectRun(in, &pos, kPadding, 0, 2));
  return Match(token, pos);
}

// JWT: eyJ<header>.<payload>.<signature>, base64url.
PatternResult Jwt(const PatternInput& in) {
  if (InsideWord(in, kWordDash)) return kNo;
  size_t pos = 0;
  KILN_EXPECT(ExpectLiteral(in, &pos, "eyJ"));
  KILN_EXPECT(ExpectRun(in, &pos, kBase64Url, 7, 2048));
  KILN_EXPECT(ExpectLiteral(in, &pos, "."));
  KILN_EXPECT(ExpectRun(in, &pos, kBase64Url, 4, 8192));
  KILN_EXPECT(ExpectLiteral(in, &pos, "."));
  KILN_EXPECT(ExpectRun(in, &pos, kBase64Url, 0, 1024));
  return Match(0, pos);
}

// scheme://user:password@host: the password. Anchored at "://".
PatternResult UrlPassword(const PatternInput& in) {
  size_t pos = 0;
  KILN_EXPECT(ExpectLiteral(in, &pos, "://"));
  KILN_EXPECT(ExpectRun(in, &pos, kUrlUser, 0, 128));
  KILN_EXPECT(ExpectLiteral(in, &pos, ":"));
  const size_t password = pos;
  KILN_EXPECT(ExpectRun(in, &pos, kUrlPassword, 2, 256));
  const size_t at = in.text.substr(password, pos - password).rfind('@');
  if (at == std::string_view::npos || at == 0) return kNo;
  return Match(password, password + at);
}

// "-----<word> <LABEL>PRIVATE KEY[ BLOCK]-----" where word is BEGIN or END.
PatternResult PemLine(const PatternInput& in, std::string_view word) {
  size_t pos = 0;
  KILN_EXPECT(ExpectLiteral(in, &pos, "-----"));
  KILN_EXPECT(ExpectLiteral(in, &pos, word));
  KILN_EXPECT(ExpectLiteral(in, &pos, " "));
  const size_t label = pos;
  KILN_EXPECT(ExpectRun(in, &pos, kPemLabel, 11, 64));
  std::string_view text = in.text.substr(label, pos - label);
  if (!text.ends_with("PRIVATE KEY") && !text.ends_with("PRIVATE KEY BLOCK")) return kNo;
  KILN_EXPECT(ExpectLiteral(in, &pos, "-----"));
  return Match(0, pos);
}

PatternResult PemBegin(const PatternInput& in) {
  PatternResult r = PemLine(in, "BEGIN");
  r.opens_block = r.verdict == Verdict::kMatch;
  return r;
}

#undef KILN_EXPECT

constexpr CredentialPattern kPatterns[] = {
    {"aws_access_key_id", "A", "KS", &kAlnum, AwsAccessKeyId},
    {"aws_secret_access_key", "aA", "wW", &kWord, AwsSecretAccessKey},
    {"github_token", "g", "h", &kWord, GitHubToken},
    {"github_pat", "g", "i", &kWord, GitHubPat},
    {"slack_token", "x", "o", &kWord, SlackToken},
    {"sk_api_key", "s", "k", &kWordDash, SkKey},
    {"google_api_key", "A", "I", &kWordDash, GoogleApiKey},
    {"bearer_token", "bB", "eE", &kWord, BearerToken},
    {"jwt", "e", "y", &kWordDash, Jwt},
    {"url_password", ":", "/", nullptr, UrlPassword},
    {"pem_private_key", "-", "-", nullptr, PemBegin},
};

}  // namespace

std::span<const CredentialPattern> CredentialPatterns() { return kPatterns; }

PatternResult MatchPemEnd(const PatternInput& in) { return PemLine(in, "END"); }

}  // namespace kiln::common
