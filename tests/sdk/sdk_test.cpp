// Starts a real cluster and checks the clients of its HTTP API against it:
// docs/openapi.yaml (every route and answer), and each SDK's end-to-end test
// through its
// run.sh (tests/sdk/<language>/run.sh <workdir>), which installs the package
// from cli/sdk/ into a scratch directory as a user would and runs the test
// against the cluster (KILN_URL, KILN_TOKEN, KILN_ADMIN_TOKEN, and
// KILN_WEBHOOK_SECRET: the tenant's webhooks may call back to loopback). Passes only
// when every script passed; a script that exits 77 (its interpreter is
// missing) skips that case. Each script's report is printed either way.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <iostream>

#include "tests/support/cluster.hpp"

namespace kiln::testing {
namespace {

constexpr int kSkip = 77;
constexpr const char* kWebhookSecret = "whsec_sdk_test_0123456789";

class SdkTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterOptions o{.brokers = 1, .workers = 1, .slots = 4};
    // Both SDK tenants may call back to receivers on loopback (webhooks).
    const std::string webhooks =
        std::string(", webhooks: {allow: [\"127.0.0.1:*\"], secret: \"") + kWebhookSecret + "\"}";
    o.tenant_a_fields = webhooks;
    o.tenant_b_fields = webhooks;
    cluster_ = TestCluster::Start(o).release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  // Runs tests/sdk/<language>/run.sh as the tenant of `token`.
  void RunScript(const std::string& language, const std::string& token) {
    const std::string dir = std::string(KILN_SOURCE_DIR) + "/tests/sdk/" + language;
    const std::string work = cluster_->dir() + "/sdk-" + language;
    const std::string command = "cd " + ShellQuote(KILN_SOURCE_DIR) +
                                " && KILN_URL=" + ShellQuote(cluster_->url()) +
                                " KILN_TOKEN=" + ShellQuote(token) +
                                " KILN_ADMIN_TOKEN=" + ShellQuote(TestCluster::kAdminToken) +
                                " KILN_WEBHOOK_SECRET=" + ShellQuote(kWebhookSecret) + " bash " +
                                ShellQuote(dir + "/run.sh") + " " + ShellQuote(work);
    auto [code, output] = RunShell(command);
    std::cout << output;
    if (code == kSkip) GTEST_SKIP() << language << " SDK test skipped (see above)";
    EXPECT_EQ(code, 0) << language << " SDK test failed (see its report above)";
    if (HasFailure()) std::cerr << cluster_->DumpLogs();
  }
  static TestCluster* cluster_;
};
TestCluster* SdkTest::cluster_ = nullptr;

// Each SDK as its own tenant: their lists and sessions stay apart.
TEST_F(SdkTest, Python) { RunScript("python", TestCluster::kToken); }
TEST_F(SdkTest, TypeScript) { RunScript("typescript", TestCluster::kOtherToken); }

// docs/openapi.yaml: the broker's routes, and its answers validated against
// the document's schemas (tests/openapi/check_openapi.py).
TEST_F(SdkTest, OpenApiDescribesEveryRouteAndAnswer) {
  const std::string command = "cd " + ShellQuote(KILN_SOURCE_DIR) +
                              " && KILN_URL=" + ShellQuote(cluster_->url()) +
                              " KILN_TOKEN=" + ShellQuote(TestCluster::kToken) +
                              " KILN_ADMIN_TOKEN=" + ShellQuote(TestCluster::kAdminToken) +
                              " /usr/bin/python3 tests/openapi/check_openapi.py " +
                              ShellQuote(std::string(KILN_BINARY_DIR) + "/bin/kiln-broker");
  auto [code, output] = RunShell(command);
  std::cout << output;
  if (code == kSkip) GTEST_SKIP() << "the OpenAPI check skipped (see above)";
  EXPECT_EQ(code, 0) << "the OpenAPI check failed (see its report above)";
  if (HasFailure()) std::cerr << cluster_->DumpLogs();
}

}  // namespace
}  // namespace kiln::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
