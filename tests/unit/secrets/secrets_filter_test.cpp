#include "common/secrets/secrets_filter.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

namespace kiln::common {
namespace {

using Policy = std::shared_ptr<const SecretsPolicy>;

Policy MakePolicy(const std::vector<std::string>& secrets,
                  SecretsPolicy::Patterns patterns = SecretsPolicy::Patterns::kBuiltIn) {
  StatusOr<Policy> policy = SecretsPolicy::Create(secrets, patterns);
  EXPECT_TRUE(policy.ok()) << policy.status().ToString();
  return policy.ok() ? *policy : nullptr;
}

struct Streamed {
  std::string out;
  uint32_t redactions = 0;
  size_t max_pending = 0;
};

// Feeds `text` in random pieces: 1 byte, small, or large.
Streamed Stream(const Policy& policy, std::string_view text, std::mt19937& rng) {
  SecretsFilter filter(policy);
  Streamed s;
  const int style = static_cast<int>(rng() % 4);
  size_t at = 0;
  while (at < text.size()) {
    size_t n = style == 0   ? 1
               : style == 1 ? 1 + rng() % 8
               : style == 2 ? 1 + rng() % 200
                            : 1 + rng() % 5000;
    n = std::min(n, text.size() - at);
    if (rng() % 16 == 0) filter.Push("", &s.out);  // empty chunks are harmless
    filter.Push(text.substr(at, n), &s.out);
    s.max_pending = std::max(s.max_pending, filter.pending_bytes());
    at += n;
  }
  filter.Finish(&s.out);
  s.redactions = filter.redactions();
  return s;
}

// Reference for literal secrets only: cover every occurrence, merge spans that share a byte.
std::string NaiveMask(const std::vector<std::string>& secrets, std::string_view text,
                      uint32_t* count) {
  std::vector<std::pair<size_t, size_t>> spans;
  for (const std::string& s : secrets) {
    if (s.empty()) continue;
    for (size_t at = text.find(s); at != std::string_view::npos; at = text.find(s, at + 1)) {
      spans.push_back({at, at + s.size()});
    }
  }
  std::sort(spans.begin(), spans.end());
  std::string out;
  size_t pos = 0;
  *count = 0;
  for (size_t i = 0; i < spans.size();) {
    size_t begin = spans[i].first, end = spans[i].second;
    for (++i; i < spans.size() && spans[i].first < end; ++i) end = std::max(end, spans[i].second);
    out.append(text.substr(pos, begin - pos));
    out += "***";
    ++*count;
    pos = end;
  }
  out.append(text.substr(pos));
  return out;
}

std::string RandomString(std::mt19937& rng, size_t len, std::string_view alphabet) {
  std::string s;
  for (size_t i = 0; i < len; ++i) s += alphabet[rng() % alphabet.size()];
  return s;
}

std::string RandomBytes(std::mt19937& rng, size_t len) {
  std::string s;
  for (size_t i = 0; i < len; ++i) s += static_cast<char>(rng() & 0xff);
  return s;
}

constexpr std::string_view kUpper = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

// --- Policy ------------------------------------------------------------------------------------

TEST(SecretsPolicy, IgnoresEmptySecretsAndRefusesShortOnes) {
  StatusOr<Policy> ok = SecretsPolicy::Create({"", "hunter22", ""});
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)->secret_count(), 1u);

  StatusOr<Policy> short_one = SecretsPolicy::Create({"hunter22", "abc"});
  ASSERT_FALSE(short_one.ok());
  EXPECT_EQ(short_one.status().code(), Code::kInvalidRequest);
  EXPECT_EQ(short_one.status().message().find("abc"), std::string::npos) << "quotes the secret";

  StatusOr<Policy> long_one =
      SecretsPolicy::Create({std::string(SecretsPolicy::kMaxSecretBytes + 1, 'x')});
  EXPECT_EQ(long_one.status().code(), Code::kInvalidRequest);
}

TEST(SecretsPolicy, BoundsPendingBytes) {
  EXPECT_EQ(MakePolicy({}, SecretsPolicy::Patterns::kNone)->max_pending_bytes(), 0u);
  EXPECT_EQ(MakePolicy({"0123456789"}, SecretsPolicy::Patterns::kNone)->max_pending_bytes(), 9u);
  EXPECT_EQ(MakePolicy({"0123456789"})->max_pending_bytes(), kMaxPatternBytes);
}

// --- Literal secrets ---------------------------------------------------------------------------

TEST(SecretsFilter, MasksRegisteredSecretsAndCounts) {
  Policy policy = MakePolicy({"hunter22", "CorrectHorse"});
  uint32_t count = 0;
  EXPECT_EQ(policy->Mask("pw=hunter22 and CorrectHorse, hunter2", &count),
            "pw=*** and ***, hunter2");
  EXPECT_EQ(count, 2u);
}

TEST(SecretsFilter, OverlappingSecretsBecomeOneMask) {
  Policy policy = MakePolicy({"abcdef", "defghi"}, SecretsPolicy::Patterns::kNone);
  uint32_t count = 0;
  EXPECT_EQ(policy->Mask("xabcdefghiy", &count), "x***y");
  EXPECT_EQ(count, 1u);
  // Touching (no shared byte) occurrences are two masks.
  count = 0;
  EXPECT_EQ(policy->Mask("abcdefdefghi", &count), "******");
  EXPECT_EQ(count, 2u);
}

TEST(SecretsFilter, SecretThatIsAPrefixOfAnother) {
  Policy policy = MakePolicy({"secret", "secret123"}, SecretsPolicy::Patterns::kNone);
  EXPECT_EQ(policy->Mask("a secret123 b"), "a *** b");
  EXPECT_EQ(policy->Mask("a secret12 b"), "a ***12 b");
  EXPECT_EQ(policy->Mask("a secre b"), "a secre b");
}

TEST(SecretsFilter, SecretOneCharacterPerChunkIsMaskedInEveryChannel) {
  const std::string secret = "tok_9f8e7d6c5b4a";
  Policy policy = MakePolicy({secret});
  const std::string line = "the token is " + secret + "!\n";
  for (int stream = 0; stream < 2; ++stream) {  // stdout and stderr each have a filter
    SecretsFilter filter(policy);
    std::string out;
    for (char c : line) {
      std::string piece = filter.Push(std::string_view(&c, 1));
      EXPECT_EQ(piece.find('9'), std::string::npos) << "secret byte emitted early";
      out += piece;
    }
    out += filter.Finish();
    EXPECT_EQ(out, "the token is ***!\n");
    EXPECT_EQ(filter.redactions(), 1u);
  }
  // `result` (JSON) and error messages go through Mask.
  uint32_t count = 0;
  EXPECT_EQ(policy->Mask("{\"token\":\"" + secret + "\"}", &count), "{\"token\":\"***\"}");
  EXPECT_EQ(policy->Mask("KeyError: '" + secret + "'", &count), "KeyError: '***'");
  EXPECT_EQ(count, 2u);
}

TEST(SecretsFilter, SecretsAreAlsoMatchedJsonEscaped) {
  const std::string secret = "pa\"ss\\wo\nrd";
  Policy policy = MakePolicy({secret});
  EXPECT_EQ(policy->Mask("raw " + secret), "raw ***");
  EXPECT_EQ(policy->Mask(R"({"p": "pa\"ss\\wo\nrd"})"), R"({"p": "***"})");
}

TEST(SecretsFilter, EmitsPlainTextWithoutDelay) {
  // Bytes that cannot start a secret or pattern are not held back.
  Policy policy = MakePolicy({"hunter22"});
  SecretsFilter filter(policy);
  EXPECT_EQ(filter.Push("plain line\n"), "plain line\n");
  EXPECT_EQ(filter.Push("now hun"), "now ");
  EXPECT_EQ(filter.pending_bytes(), 3u);
  EXPECT_EQ(filter.Push("ger\n"), "hunger\n");
  EXPECT_EQ(filter.Push("sk-abc"), "");  // could be the start of an API key
  EXPECT_EQ(filter.Push("\n"), "sk-abc\n");
  EXPECT_EQ(filter.Finish(), "");
}

// --- Properties --------------------------------------------------------------------------------

TEST(SecretsFilterProperty, LiteralsMatchNaiveReferenceUnderRandomSplits) {
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 3000; ++iter) {
    // Small alphabet: secrets overlap, repeat and nest often.
    std::vector<std::string> secrets;
    for (size_t n = 1 + rng() % 5; n > 0; --n) {
      secrets.push_back(RandomString(rng, 4 + rng() % 6, "abc"));
    }
    Policy policy = MakePolicy(secrets, SecretsPolicy::Patterns::kNone);
    std::string text = RandomString(rng, rng() % 300, "abcd \n");
    uint32_t want_count = 0;
    const std::string want = NaiveMask(secrets, text, &want_count);
    uint32_t count = 0;
    ASSERT_EQ(policy->Mask(text, &count), want) << text;
    ASSERT_EQ(count, want_count);
    Streamed s = Stream(policy, text, rng);
    ASSERT_EQ(s.out, want) << text;
    ASSERT_EQ(s.redactions, want_count);
    ASSERT_LE(s.max_pending, policy->max_pending_bytes());
  }
}

// Text made of fragments that exercise every pattern, near misses, PEM blocks and secrets.
std::string RandomMixedText(std::mt19937& rng, const std::vector<std::string>& secrets) {
  static const std::vector<std::string> kFragments = {"AKIAIOSFODNN7EXAMPLE",
                                                      "AKIA",
                                                      "ASIA12345",
                                                      "aws_secret_access_key = ",
                                                      "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                                                      "ghp_",
                                                      "github_pat_",
                                                      "xoxb-",
                                                      "sk-",
                                                      "sk-ant-api03-",
                                                      "AIza",
                                                      "Bearer ",
                                                      "Authorization: bearer ",
                                                      "eyJhbGciOiJIUzI1NiJ9",
                                                      ".",
                                                      "eyJ",
                                                      "postgres://",
                                                      "user:",
                                                      "pa@ss",
                                                      "@host",
                                                      "://",
                                                      ":",
                                                      "@",
                                                      "/",
                                                      "-----BEGIN RSA PRIVATE KEY-----",
                                                      "-----END RSA PRIVATE KEY-----",
                                                      "-----",
                                                      "-",
                                                      "PRIVATE KEY",
                                                      "\n",
                                                      " ",
                                                      "\"",
                                                      "abcdefghijklmnopqrstuvwxyz0123456789",
                                                      "ABCDEFGHIJKLMNOP",
                                                      "hello world ",
                                                      std::string("\0\xff\xfe", 3)};
  std::string text;
  for (size_t n = rng() % 60; n > 0; --n) {
    const int kind = static_cast<int>(rng() % 10);
    if (kind < 6) {
      text += kFragments[rng() % kFragments.size()];
    } else if (kind < 8) {
      text += RandomString(rng, rng() % 40, "abcXYZ019-_/+=. \n");
    } else if (kind == 8 && !secrets.empty()) {
      text += secrets[rng() % secrets.size()];
    } else {
      text += RandomBytes(rng, rng() % 20);
    }
  }
  return text;
}

TEST(SecretsFilterProperty, StreamingEqualsOneShotAndNeverLeaksASecret) {
  std::mt19937 rng(99);
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<std::string> secrets;
    for (size_t n = rng() % 4; n > 0; --n)
      secrets.push_back(RandomString(rng, 4 + rng() % 30, kUpper));
    Policy policy = MakePolicy(secrets);
    const std::string text = RandomMixedText(rng, secrets);
    uint32_t count = 0;
    const std::string whole = policy->Mask(text, &count);
    for (const std::string& secret : secrets) {
      ASSERT_EQ(whole.find(secret), std::string::npos) << text;
    }
    for (int split = 0; split < 3; ++split) {
      Streamed s = Stream(policy, text, rng);
      ASSERT_EQ(s.out, whole) << text;
      ASSERT_EQ(s.redactions, count);
      ASSERT_LE(s.max_pending, policy->max_pending_bytes());
    }
  }
}

TEST(SecretsFilterProperty, TextWithoutSecretsPassesByteForByte) {
  std::mt19937 rng(5);
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<std::string> secrets;
    for (size_t n = rng() % 5; n > 0; --n)
      secrets.push_back(RandomString(rng, 8 + rng() % 20, kUpper));
    Policy policy = MakePolicy(secrets);
    // Any bytes: NUL, invalid UTF-8, control bytes; or log-like lines.
    std::string text =
        rng() % 2 ? RandomBytes(rng, rng() % 3000)
                  : RandomString(rng, rng() % 3000, "the quick brown fox 0123456789:/.-=\n\t");
    bool has_secret = false;
    for (const std::string& s : secrets) has_secret |= text.find(s) != std::string::npos;
    if (has_secret) continue;
    uint32_t count = 0;
    ASSERT_EQ(policy->Mask(text, &count), text);
    ASSERT_EQ(count, 0u);
    Streamed s = Stream(policy, text, rng);
    ASSERT_EQ(s.out, text);
    ASSERT_EQ(s.redactions, 0u);
  }
}

TEST(SecretsFilterProperty, RedactionsEqualInsertedSecrets) {
  std::mt19937 rng(2024);
  for (int iter = 0; iter < 2000; ++iter) {
    std::vector<std::string> secrets;
    for (size_t n = 1 + rng() % 6; n > 0; --n) {
      secrets.push_back("Q" + RandomString(rng, 7 + rng() % 20, kUpper));
    }
    Policy policy = MakePolicy(secrets);
    std::string text;
    std::string want;
    uint32_t inserted = 0;
    for (size_t n = rng() % 40; n > 0; --n) {
      if (rng() % 3 == 0) {
        text += secrets[rng() % secrets.size()];
        want += "***";
        ++inserted;
      } else {
        std::string words = RandomString(rng, rng() % 50, "abcdefghijklmnopqrstuvwxyz \n,.");
        text += words;
        want += words;
      }
    }
    Streamed s = Stream(policy, text, rng);
    ASSERT_EQ(s.out, want) << text;
    ASSERT_EQ(s.redactions, inserted);
  }
}

}  // namespace
}  // namespace kiln::common
