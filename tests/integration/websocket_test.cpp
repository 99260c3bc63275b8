// The WebSocket channel through a real cluster (docs/api.md, "WebSocket
// channel: GET /v1/ws"), driven by an independent client:
// tests/integration/websocket_client.py with python's `websockets` library,
// one scenario per test. One connection follows three jobs in three
// languages at once and answers all their tool calls — jobs submitted
// through the other broker, so calls and answers cross brokers through Redis
// — and the audit trail shows each call answered. An error answer reaches
// the code as ToolError, and a new connection resumes an ended job's events
// after a chunk, after `start` and after `end`, as the SSE stream does.
// Hostile messages (not JSON, not an object, an unknown type or field, a
// binary frame, another tenant's job, a second follow, an admin's answer)
// get the API's error codes with their `ref` and leave the connection
// serving; refused handshakes get 401, a plain GET 426. The limits hold: a
// message over max_message_bytes closes with 1009, a flood of messages is
// RATE_LIMITED past the rate, a tenant gets 429 past max_websockets on
// one broker while other tenants and brokers are unaffected, a follow past
// max_follows is LIMIT_EXCEEDED, and a peer that answers no ping is closed
// at idle_timeout_ms while one that answers stays.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <iostream>

#include "tests/support/cluster.hpp"

namespace kiln::testing {
namespace {

constexpr const char* kPython = "/usr/bin/python3";

class WebSocketTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // The client needs libraries the system python may lack: skip, with
    // what python said, rather than start a cluster for nothing.
    auto [code, output] = RunShell(std::string(kPython) + " -c 'import websockets, httpx'");
    if (code != 0) {
      why_ = output;
      return;
    }
    // The limits scenario counts on these values (websocket_client.py).
    cluster_ =
        TestCluster::Start({.brokers = 2,
                            .workers = 1,
                            .slots = 4,
                            .tenant_a_fields = ", max_websockets: 3",
                            .broker_http_fields = ", websocket: {max_message_bytes: 65536, "
                                                  "messages_per_second: 20, message_burst: 20, "
                                                  "max_follows: 4, idle_timeout_ms: 4000}"});
  }
  static void TearDownTestSuite() { cluster_.reset(); }
  void SetUp() override {
    if (cluster_ == nullptr) {
      GTEST_SKIP() << kPython << " cannot import websockets, httpx: " << why_;
    }
  }
  void TearDown() override {
    if (cluster_ != nullptr && HasFailure()) std::cerr << cluster_->DumpLogs();
  }
  // Runs one scenario of websocket_client.py against the cluster.
  static void RunScenario(const std::string& scenario) {
    const std::string command =
        "KILN_URLS=" + ShellQuote(cluster_->url(0) + "," + cluster_->url(1)) +
        " KILN_TOKEN=" + ShellQuote(TestCluster::kToken) +
        " KILN_OTHER_TOKEN=" + ShellQuote(TestCluster::kOtherToken) +
        " KILN_ADMIN_TOKEN=" + ShellQuote(TestCluster::kAdminToken) + " " + kPython + " " +
        ShellQuote(std::string(KILN_SOURCE_DIR) + "/tests/integration/websocket_client.py") + " " +
        scenario;
    auto [code, output] = RunShell(command);
    EXPECT_EQ(code, 0) << output;
  }
  static std::unique_ptr<TestCluster> cluster_;
  static inline std::string why_;
};
std::unique_ptr<TestCluster> WebSocketTest::cluster_;

TEST_F(WebSocketTest, OneConnectionFollowsAndAnswersSeveralJobs) { RunScenario("code_mode"); }

TEST_F(WebSocketTest, AnErrorAnswerAndResumingAnEndedJob) {
  RunScenario("answer_error_and_resume");
}

TEST_F(WebSocketTest, HostileMessagesGetTheApisErrorsAndChangeNothing) { RunScenario("hostile"); }

TEST_F(WebSocketTest, FollowLimitAndIdleTimeout) { RunScenario("follows_and_idle"); }

// Last: it fills tenant-a's connections on broker 0 and floods its rate.
TEST_F(WebSocketTest, MessageSizeRateAndConnectionLimits) { RunScenario("limits"); }

}  // namespace
}  // namespace kiln::testing
