// The built-in credential patterns, through SecretsPolicy::Mask: each masks its sample and leaves
// near misses alone.
#include "common/secrets/credential_patterns.hpp"

#include <gtest/gtest.h>

#include <string>

#include "common/secrets/secrets_filter.hpp"

namespace kiln::common {
namespace {

struct Case {
  std::string input;
  std::string masked;  // == input for a near miss
};

std::shared_ptr<const SecretsPolicy> PatternsOnly() {
  StatusOr<std::shared_ptr<const SecretsPolicy>> policy = SecretsPolicy::Create({});
  EXPECT_TRUE(policy.ok());
  return *policy;
}

void ExpectCases(const std::vector<Case>& cases) {
  auto policy = PatternsOnly();
  for (const Case& c : cases) {
    uint32_t count = 0;
    EXPECT_EQ(policy->Mask(c.input, &count), c.masked) << c.input;
    EXPECT_EQ(count, c.input == c.masked ? 0u : 1u) << c.input;
    // One byte at a time gives the same.
    SecretsFilter filter(policy);
    std::string out;
    for (char ch : c.input) filter.Push(std::string_view(&ch, 1), &out);
    filter.Finish(&out);
    EXPECT_EQ(out, c.masked) << c.input;
  }
}

const std::string k36 = "abcdefghijklmnopqrstuvwxyz0123456789";

TEST(CredentialPatterns, AwsAccessKeyId) {
  ExpectCases({
      {"key=AKIAIOSFODNN7EXAMPLE end", "key=*** end"},
      {"ASIAY34FZKBOKMUTVV7A", "***"},
      {"AKIA", "AKIA"},
      {"AKIA is a prefix", "AKIA is a prefix"},
      {"AKIAIOSFODNN7EXAMPL", "AKIAIOSFODNN7EXAMPL"},
      {"xAKIAIOSFODNN7EXAMPLE", "xAKIAIOSFODNN7EXAMPLE"},
      {"AKIAiosfodnn7example", "AKIAiosfodnn7example"},
  });
}

TEST(CredentialPatterns, AwsSecretAccessKey) {
  const std::string secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
  ExpectCases({
      {"aws_secret_access_key = " + secret + "\n", "aws_secret_access_key = ***\n"},
      {"export AWS_SECRET_ACCESS_KEY=" + secret, "export AWS_SECRET_ACCESS_KEY=***"},
      {"{\"aws_secret_access_key\": \"" + secret + "\"}", "{\"aws_secret_access_key\": \"***\"}"},
      {"aws_secret_access_key is required", "aws_secret_access_key is required"},
      {"aws_secret_access_key = short", "aws_secret_access_key = short"},
      {"my_aws_secret_access_key=" + secret, "my_aws_secret_access_key=" + secret},
  });
}

TEST(CredentialPatterns, GitHubTokens) {
  ExpectCases({
      {"token ghp_" + k36 + " ok", "token *** ok"},
      {"gho_" + k36, "***"},
      {"ghs_" + k36, "***"},
      {"github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "***"},
      {"ghp_short", "ghp_short"},
      {"ghp_", "ghp_"},
      {"xghp_" + k36, "xghp_" + k36},
      {"github_pat_", "github_pat_"},
  });
}

TEST(CredentialPatterns, SlackTokens) {
  ExpectCases({
      {"SLACK=xoxb-1234567890-abcdefghij", "SLACK=***"},
      {"xoxp-1234567890-0987654321-abcdef", "***"},
      {"xoxb-123", "xoxb-123"},
      {"xoxz-1234567890abcdef", "xoxz-1234567890abcdef"},
  });
}

TEST(CredentialPatterns, OpenAiAndAnthropicKeys) {
  ExpectCases({
      {"OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwxyz012345\n", "OPENAI_API_KEY=***\n"},
      {"sk-ant-api03-abcdefghijklmnopqrstuvwxyz-_AB", "***"},
      {"sk-", "sk-"},
      {"pip install sk-learn", "pip install sk-learn"},
      {"task-abcdefghijklmnopqrstuvwxyz0123", "task-abcdefghijklmnopqrstuvwxyz0123"},
      {"sk-short-key", "sk-short-key"},
  });
}

TEST(CredentialPatterns, GoogleApiKey) {
  ExpectCases({
      {"key=AIzaSyA-1234567890abcdefghijklmnopqrstu&x", "key=***&x"},
      {"AIza", "AIza"},
      {"AIzaSyA-12345", "AIzaSyA-12345"},
  });
}

TEST(CredentialPatterns, BearerTokens) {
  ExpectCases({
      {"Authorization: Bearer abcdef0123456789ABCDEF==\r\n", "Authorization: Bearer ***\r\n"},
      {"authorization: bearer abcdefghijklmnopq", "authorization: bearer ***"},
      {"Bearer token", "Bearer token"},
      {"Bearer authentication is used", "Bearer authentication is used"},
      {"Bearer", "Bearer"},
      {"Bearer ", "Bearer "},
  });
}

TEST(CredentialPatterns, Jwt) {
  const std::string jwt =
      "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
      "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
  ExpectCases({
      {"jwt: " + jwt + "\n", "jwt: ***\n"},
      // The bearer pattern and the JWT cover the same bytes: one redaction.
      {"Authorization: Bearer " + jwt, "Authorization: Bearer ***"},
      {"eyJ", "eyJ"},
      {"eyJhbGciOiJIUzI1NiJ9 alone", "eyJhbGciOiJIUzI1NiJ9 alone"},
      {"eyJabc.def", "eyJabc.def"},
  });
}

TEST(CredentialPatterns, PasswordsInConnectionStrings) {
  ExpectCases({
      {"postgres://admin:s3cr3t@db.internal:5432/app", "postgres://admin:***@db.internal:5432/app"},
      {"redis://:hunter22@localhost:6379/0", "redis://:***@localhost:6379/0"},
      {"mongodb+srv://u:p@ss@cluster0/x", "mongodb+srv://u:***@cluster0/x"},
      {"url='amqp://guest:guest@rabbit'", "url='amqp://guest:***@rabbit'"},
      {"http://example.com:8080/path", "http://example.com:8080/path"},
      {"https://user@host/x", "https://user@host/x"},
      {"http://host:8080/a@b", "http://host:8080/a@b"},
      {"git@github.com:org/repo.git", "git@github.com:org/repo.git"},
      {"see ://", "see ://"},
  });
}

TEST(CredentialPatterns, PemPrivateKeyBlocks) {
  ExpectCases({
      {"a\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----\nb",
       "a\n***\nb"},
      {"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1r\n-----END OPENSSH PRIVATE KEY-----",
       "***"},
      {"-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBF\n-----END PGP PRIVATE KEY BLOCK-----\n",
       "***\n"},
      // Dashes and other END lines inside do not end the block.
      {"-----BEGIN PRIVATE KEY-----\nab-cd--\n-----END CERTIFICATE-----\nx\n"
       "-----END PRIVATE KEY-----after",
       "***after"},
      // No END line: masked to the end of the stream.
      {"x\n-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\nmore output", "x\n***"},
      {"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
       "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"},
      {"-----BEGIN PUBLIC KEY-----", "-----BEGIN PUBLIC KEY-----"},
      {"-----BEGIN PRIVATE KEY", "-----BEGIN PRIVATE KEY"},
  });
}

TEST(CredentialPatterns, LongPemBlockIsNotHeldBack) {
  auto policy = PatternsOnly();
  SecretsFilter filter(policy);
  std::string out = filter.Push("log\n-----BEGIN PRIVATE KEY-----\n");
  const std::string line(63, 'A');
  for (int i = 0; i < 20000; ++i) {  // ~1.3 MB of key material
    out += filter.Push(line + "\n");
    ASSERT_LE(filter.pending_bytes(), 64u);
  }
  out += filter.Push("-----END PRIVATE KEY-----\nafter\n");
  out += filter.Finish();
  EXPECT_EQ(out, "log\n***\nafter\n");
  EXPECT_EQ(filter.redactions(), 1u);
}

TEST(CredentialPatterns, EveryMatcherDecidesWithinTheBound) {
  // A worst case for each: a run of its token bytes as long as the bound.
  for (const CredentialPattern& p : CredentialPatterns()) {
    for (char fill : {'A', 'a', '0', '-', ' ', '@', ':'}) {
      std::string text(kMaxPatternBytes, fill);
      for (char trigger : p.firsts) {
        text[0] = trigger;
        for (std::string_view prefix :
             {"AKIA", "aws_secret_access_key=", "ghp_", "github_pat_", "xoxb-", "sk-", "AIza",
              "bearer ", "eyJ", "://a:", "-----BEGIN "}) {
          std::string t = text;
          t.replace(0, prefix.size(), prefix);
          if (t[0] != trigger) continue;
          PatternResult r = p.match({.text = t, .at_end = false, .prev = ' '});
          EXPECT_NE(r.verdict, Verdict::kNeedMore) << p.name << " " << prefix << " " << fill;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kiln::common
