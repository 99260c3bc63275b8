// Replays every fuzz target's checked-in inputs through its entry point
// (fuzz_targets.hpp), with any compiler, under ctest: the seed corpus
// (tests/fuzz/corpus/<target>/) and the inputs that once broke a contract
// (tests/fuzz/regressions/<target>/). A violation aborts the test binary;
// the last "replaying" line on stderr names the input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_targets.hpp"

namespace kiln::fuzz {
namespace {

namespace fs = std::filesystem;

struct Target {
  const char* name;  // the libFuzzer binary and its directories
  int (*one_input)(const uint8_t* data, size_t size);
};

const Target kTargets[] = {
    {"protocol_fuzz", &ProtocolOneInput}, {"client_protocol_fuzz", &ClientProtocolOneInput},
    {"submit_fuzz", &SubmitOneInput},     {"http_fuzz", &HttpOneInput},
    {"tool_fuzz", &ToolOneInput},
};

std::vector<fs::path> Inputs(const fs::path& dir) {
  std::vector<fs::path> files;
  if (!fs::is_directory(dir)) return files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().filename() != "README.md") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

size_t Replay(const Target& t, const fs::path& dir) {
  size_t n = 0;
  for (const fs::path& file : Inputs(dir)) {
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::fprintf(stderr, "replaying %s\n", file.c_str());
    t.one_input(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    ++n;
  }
  return n;
}

class FuzzReplayTest : public ::testing::TestWithParam<Target> {};

TEST_P(FuzzReplayTest, CorpusAndRegressions) {
  const fs::path fuzz_dir = fs::path(KILN_SOURCE_DIR) / "tests" / "fuzz";
  // A target without seeds would start libFuzzer from nothing: keep some.
  EXPECT_GE(Replay(GetParam(), fuzz_dir / "corpus" / GetParam().name), 5u);
  Replay(GetParam(), fuzz_dir / "regressions" / GetParam().name);
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzReplayTest, ::testing::ValuesIn(kTargets),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace kiln::fuzz
