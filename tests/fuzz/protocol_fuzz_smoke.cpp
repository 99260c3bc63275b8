// Runs the codec's fuzz entry point (protocol_fuzz.cpp) over a deterministic
// corpus of mutated valid frames, so every CI build, gcc included, exercises
// the fuzz target's invariants without libFuzzer. A few seconds at most.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/protocol/codec.hpp"
#include "tests/fuzz/fuzz_targets.hpp"
#include "tests/unit/protocol/sample_messages.hpp"

namespace kiln::common::protocol {
namespace {

void Feed(const std::string& bytes) {
  kiln::fuzz::ProtocolOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

std::vector<std::string> Seeds() {
  std::vector<std::string> seeds;
  for (const Message& m : samples::FullMessages()) seeds.push_back(Encode(m));
  for (const Message& m : samples::MinimalMessages()) seeds.push_back(Encode(m));
  return seeds;
}

// Applies one libFuzzer-style mutation: flip a bit, write an interesting
// byte, insert or erase bytes, copy a run from elsewhere in the frame, or
// splice in a piece of another seed.
void Mutate(std::mt19937& rng, const std::vector<std::string>& seeds, std::string& f) {
  static constexpr uint8_t kInteresting[] = {
      0x00, 0x01, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xca,
      0xcb, 0xcc, 0xcf, 0xd0, 0xd3, 0xd4, 0xd9, 0xdb, 0xdc, 0xdd, 0xde, 0xdf, 0xe0, 0xff};
  if (f.empty()) {
    f.push_back(static_cast<char>(rng()));
    return;
  }
  const size_t pos = rng() % f.size();
  switch (rng() % 7) {
    case 0:
      f[pos] = static_cast<char>(f[pos] ^ (1u << (rng() % 8)));
      break;
    case 1:
      f[pos] = static_cast<char>(kInteresting[rng() % sizeof(kInteresting)]);
      break;
    case 2:
      f.insert(pos, 1 + rng() % 3, static_cast<char>(rng()));
      break;
    case 3:
      f.erase(pos, 1 + rng() % 8);
      break;
    case 4: {
      const size_t from = rng() % f.size();
      const size_t len = 1 + rng() % 16;
      f.insert(pos, f.substr(from, len));
      break;
    }
    case 5: {
      const std::string& other = seeds[rng() % seeds.size()];
      const size_t from = rng() % other.size();
      f = f.substr(0, pos) + other.substr(from);
      break;
    }
    default:
      f.resize(pos);
      break;
  }
}

TEST(ProtocolFuzzSmokeTest, ValidFramesRoundTrip) {
  for (const std::string& seed : Seeds()) {
    ASSERT_TRUE(Decode(seed).ok());
    Feed(seed);
  }
}

TEST(ProtocolFuzzSmokeTest, MutatedFrames) {
  const std::vector<std::string> seeds = Seeds();
  std::mt19937 rng(0x6b696c6e);  // "kiln"
  size_t accepted = 0;
  size_t inputs = 0;
  for (int i = 0; i < 200000; ++i) {
    std::string f = seeds[rng() % seeds.size()];
    const int rounds = 1 + static_cast<int>(rng() % 6);
    for (int r = 0; r < rounds; ++r) Mutate(rng, seeds, f);
    Feed(f);  // aborts the test binary on a broken invariant
    ++inputs;
    if (Decode(f).ok()) ++accepted;
  }
  EXPECT_EQ(inputs, 200000u);
  // The corpus reaches past the parser into the message decoders.
  EXPECT_GT(accepted, 2000u);
}

}  // namespace
}  // namespace kiln::common::protocol
