// Starts a real cluster and runs tests/mcp/mcp_test.mjs, which drives
// `kiln mcp` with the official MCP TypeScript SDK client. Exits 77 (ctest's
// SKIP_RETURN_CODE) when node or the SDK (tests/mcp/node_modules, installed
// by tests/run.sh) is missing; otherwise passes only when every check of the
// script passed. The script's report is printed either way.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <iostream>

#include "tests/support/cluster.hpp"

namespace kiln::testing {
namespace {

const std::string kMcpDir = std::string(KILN_SOURCE_DIR) + "/tests/mcp";
constexpr int kSkip = 77;

// Runs mcp_test.mjs (with `args`) against `cluster` as the tenant of `token`.
void RunScript(TestCluster& cluster, const std::string& token, const std::string& args) {
  const std::string command =
      "cd " + ShellQuote(kMcpDir) +
      " && KILN_BIN=" + ShellQuote(std::string(KILN_BINARY_DIR) + "/bin/kiln") +
      " KILN_URL=" + ShellQuote(cluster.url()) + " KILN_TOKEN=" + ShellQuote(token) +
      " node mcp_test.mjs " + args;
  auto [code, output] = RunShell(command);
  std::cout << output;
  EXPECT_EQ(code, 0) << "mcp_test.mjs " << args << " failed (see its report above)";
}

TEST(McpSdkTest, KilnMcpPassesTheSdkClientChecks) {
  auto cluster = TestCluster::Start({.brokers = 1, .workers = 1, .slots = 3});
  RunScript(*cluster, TestCluster::kToken, "");
  if (HasFailure()) std::cerr << cluster->DumpLogs();
}

// A tenant with no code-execution settings: disabled, the default (issue 6).
TEST(McpSdkTest, DisabledTenantIsNotOfferedExecuteCode) {
  ClusterOptions options{.brokers = 1, .workers = 1};
  options.extra_tenants_yaml = "  - {name: tenant-off, tokens: [\"tenant-off-token\"]}\n";
  auto cluster = TestCluster::Start(options);
  RunScript(*cluster, "tenant-off-token", "--disabled");
  if (HasFailure()) std::cerr << cluster->DumpLogs();
}

}  // namespace
}  // namespace kiln::testing

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (kiln::testing::RunShell("node --version").first != 0) {
    std::cout << "SKIP: node is not installed (deploy/install-deps.sh installs it)\n";
    return kiln::testing::kSkip;
  }
  if (!fs::exists(kiln::testing::kMcpDir + "/node_modules/@modelcontextprotocol/sdk")) {
    std::cout << "SKIP: the MCP SDK is not installed in " << kiln::testing::kMcpDir
              << "/node_modules; run tests/run.sh or `npm ci` there\n";
    return kiln::testing::kSkip;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
