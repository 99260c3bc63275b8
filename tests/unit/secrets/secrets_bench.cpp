// kiln-secrets-bench: throughput of the streaming secrets filter (docs/secrets.md).
//
//   ./build/tests/unit/secrets/kiln-secrets-bench [megabytes=10]
//
// For each scenario it pushes the text through one SecretsFilter in fixed-size chunks and
// prints MB/s and ns/byte (best of 3 runs).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "common/secrets/secrets_filter.hpp"

namespace {

using kiln::common::SecretsFilter;
using kiln::common::SecretsPolicy;

std::string LogText(size_t bytes, std::mt19937& rng) {
  static const char* kWords[] = {"INFO",  "request", "served", "in",       "ms",
                                 "user",  "id=42",   "GET",    "/api/v1",  "status=200",
                                 "took",  "cache",   "miss",   "worker-3", "db",
                                 "query", "rows=17", "ok",     "debug",    "x"};
  std::string text;
  text.reserve(bytes + 64);
  while (text.size() < bytes) {
    text += "2024-05-01T12:00:00Z ";
    for (int w = 0; w < 10; ++w) {
      text += kWords[rng() % (sizeof(kWords) / sizeof(kWords[0]))];
      text += ' ';
    }
    text += '\n';
  }
  text.resize(bytes);
  return text;
}

std::vector<std::string> Secrets(size_t n, std::mt19937& rng) {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::vector<std::string> secrets;
  for (size_t i = 0; i < n; ++i) {
    std::string s;
    for (int j = 0; j < 32; ++j) s += kAlphabet[rng() % 62];
    secrets.push_back(s);
  }
  return secrets;
}

void Run(const char* name, const std::shared_ptr<const SecretsPolicy>& policy,
         const std::string& text, size_t chunk) {
  double best = 1e30;
  uint32_t redactions = 0;
  size_t out_bytes = 0;
  for (int rep = 0; rep < 3; ++rep) {
    SecretsFilter filter(policy);
    std::string out;
    out.reserve(chunk + 64);
    out_bytes = 0;
    auto start = std::chrono::steady_clock::now();
    for (size_t at = 0; at < text.size(); at += chunk) {
      out.clear();
      filter.Push(std::string_view(text).substr(at, chunk), &out);
      out_bytes += out.size();
    }
    out.clear();
    filter.Finish(&out);
    out_bytes += out.size();
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::min(best, secs);
    redactions = filter.redactions();
  }
  const double mb = static_cast<double>(text.size()) / 1e6;
  std::printf("%-44s chunk %6zu B  %8.1f MB/s  %6.2f ns/byte  redactions %u  out %zu B\n", name,
              chunk, mb / best, best * 1e9 / static_cast<double>(text.size()), redactions,
              out_bytes);
}

std::shared_ptr<const SecretsPolicy> Policy(const std::vector<std::string>& secrets) {
  auto policy = SecretsPolicy::Create(secrets);
  if (!policy.ok()) {
    std::fprintf(stderr, "%s\n", policy.status().ToString().c_str());
    std::exit(1);
  }
  return *policy;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t mb = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 10;
  std::mt19937 rng(42);
  const std::string plain = LogText(mb * 1000 * 1000, rng);
  const std::vector<std::string> secrets = Secrets(1000, rng);

  std::string dense = plain;  // a registered secret every 4 KB
  for (size_t at = 0; at + 32 < dense.size(); at += 4096) dense.replace(at, 32, secrets[0]);

  const auto none = Policy({});
  const auto ten = Policy({secrets.begin(), secrets.begin() + 10});
  const auto thousand = Policy(secrets);

  std::printf("kiln-secrets-bench: %zu MB of log text, built-in patterns on\n", mb);
  for (size_t chunk : {size_t{64}, size_t{64 * 1024}}) {
    Run("plain text, 0 secrets", none, plain, chunk);
    Run("plain text, 10 secrets", ten, plain, chunk);
    Run("plain text, 1000 secrets", thousand, plain, chunk);
    Run("a secret every 4 KB, 1000 secrets", thousand, dense, chunk);
  }
  return 0;
}
