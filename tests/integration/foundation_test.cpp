// End-to-end tests of one job's path through a real cluster: redis-server,
// one broker and two workers as processes on loopback, sandboxes included.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "common/base64.hpp"
#include "tests/support/cluster.hpp"

namespace kiln::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

class FoundationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = TestCluster::Start({.brokers = 1, .workers = 2}); }
  static void TearDownTestSuite() { cluster_.reset(); }
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_->DumpLogs();
  }
  static HttpReply Run(const json& req) { return cluster_->Submit(req); }

  static std::unique_ptr<TestCluster> cluster_;
};
std::unique_ptr<TestCluster> FoundationTest::cluster_;

TEST_F(FoundationTest, PythonRunsAndReturnsOutputs) {
  auto r = Run({{"language", "python"},
                {"code", "import sys\nprint('hello')\nprint('oops', file=sys.stderr)"}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["status"], "succeeded") << r.raw;
  EXPECT_EQ(r.body["stdout"], "hello\n");
  EXPECT_EQ(r.body["stderr"], "oops\n");
  EXPECT_EQ(r.body["exit_code"], 0);
  EXPECT_EQ(r.body["language"], "python");
  EXPECT_EQ(r.body["tenant"], "tenant-a");
  EXPECT_TRUE(r.body["worker"].is_string());
  EXPECT_THAT(r.body["id"].get<std::string>(), ::testing::StartsWith("ex_"));
}

TEST_F(FoundationTest, JavaScriptRunsAndReturnsOutputs) {
  auto r = Run(
      {{"language", "javascript"}, {"code", "console.log('js', 1 + 2); console.error('warn');"}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["status"], "succeeded") << r.raw;
  EXPECT_EQ(r.body["stdout"], "js 3\n");
  EXPECT_EQ(r.body["stderr"], "warn\n");
}

TEST_F(FoundationTest, ShellRunsAndReturnsExitCode) {
  auto r = Run({{"language", "shell"}, {"code", "echo out; echo err >&2; exit 3"}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["status"], "failed") << r.raw;
  EXPECT_EQ(r.body["exit_code"], 3);
  EXPECT_EQ(r.body["stdout"], "out\n");
  EXPECT_EQ(r.body["stderr"], "err\n");
}

TEST_F(FoundationTest, InputAndResultRoundTrip) {
  json input = {{"numbers", {1, 2, 3, 4}}, {"name", "k\"i\nln ✓"}};
  auto py = Run({{"language", "python"},
                 {"code", "result = {'sum': sum(numbers), 'name': name}"},
                 {"input", input}});
  ASSERT_EQ(py.status, 200) << py.raw;
  EXPECT_EQ(py.body["status"], "succeeded") << py.raw;
  EXPECT_EQ(py.body["result"], (json{{"sum", 10}, {"name", "k\"i\nln ✓"}}));

  auto js = Run({{"language", "javascript"},
                 {"code", "let result = numbers.map(x => x * 2);"},
                 {"input", input}});
  ASSERT_EQ(js.status, 200) << js.raw;
  EXPECT_EQ(js.body["result"], (json{2, 4, 6, 8})) << js.raw;

  auto sh = Run({{"language", "shell"}, {"code", "result=\"$name|$numbers\""}, {"input", input}});
  ASSERT_EQ(sh.status, 200) << sh.raw;
  EXPECT_EQ(sh.body["result"], "k\"i\nln ✓|[1,2,3,4]") << sh.raw;
}

TEST_F(FoundationTest, RaisingScriptFailsWithExceptionType) {
  auto r = Run({{"language", "python"}, {"code", "def f():\n    return 1 / 0\nf()\n"}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["status"], "failed") << r.raw;
  EXPECT_EQ(r.body["exit_code"], 1);
  ASSERT_TRUE(r.body["error"].is_object()) << r.raw;
  EXPECT_EQ(r.body["error"]["type"], "ZeroDivisionError");
  EXPECT_THAT(r.body["error"]["message"].get<std::string>(), HasSubstr("division by zero"));
  EXPECT_THAT(r.body["error"]["traceback"].get<std::string>(), HasSubstr("in f"));

  auto js = Run({{"language", "javascript"}, {"code", "null.x"}});
  ASSERT_EQ(js.status, 200) << js.raw;
  EXPECT_EQ(js.body["status"], "failed") << js.raw;
  EXPECT_EQ(js.body["error"]["type"], "TypeError") << js.raw;
}

TEST_F(FoundationTest, SleepingScriptTimesOutAndLeavesNothingBehind) {
  auto start = std::chrono::steady_clock::now();
  auto r = Run({{"language", "shell"},
                {"code", "sleep 1000 & (setsid sleep 1000 &) ; sleep 1000"},
                {"limits", {{"timeout_ms", 1000}}}});
  auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["status"], "timed_out") << r.raw;
  EXPECT_EQ(r.body["error"]["code"], "TIMEOUT");
  EXPECT_LT(elapsed, std::chrono::seconds(20));
  // No process of any sandbox uid survives the job (the pool's warm
  // sandboxes are waiting interpreters, which run as sandbox uids too, so
  // look for `sleep` specifically).
  bool clean = WaitFor(
      [] {
        for (pid_t pid : ProcessesWithUidIn(TestCluster::kUidBase, TestCluster::kUidBase + 19999)) {
          std::string comm = ReadFile("/proc/" + std::to_string(pid) + "/comm");
          if (comm.rfind("sleep", 0) == 0) return false;
        }
        return true;
      },
      std::chrono::seconds(5));
  EXPECT_TRUE(clean) << "a sleep of the job survived it";
}

TEST_F(FoundationTest, OversizedErrorsAndResultsStillEndTheJob) {
  // Both exceed what one wire message may carry for them; the job must still end.
  auto big_error = Run({{"language", "python"}, {"code", "raise ValueError('e' * 200000)"}});
  ASSERT_EQ(big_error.status, 200) << big_error.raw.substr(0, 500);
  EXPECT_EQ(big_error.body["status"], "failed");
  EXPECT_EQ(big_error.body["error"]["type"], "ValueError");
  EXPECT_LE(big_error.body["error"]["message"].get<std::string>().size(), 65536u);

  auto big_result = Run({{"language", "python"}, {"code", "result = 'r' * 9000000"}});
  ASSERT_EQ(big_result.status, 200) << big_result.raw.substr(0, 500);
  EXPECT_EQ(big_result.body["status"], "failed") << big_result.raw.substr(0, 500);
  EXPECT_EQ(big_result.body["error"]["type"], "ResultTooLarge");
  EXPECT_TRUE(big_result.body["result"].is_null());
}

TEST_F(FoundationTest, OutputOverTheCapIsTruncatedAndFlagged) {
  auto r = Run({{"language", "python"},
                {"code", "print('x' * 5000)"},
                {"limits", {{"max_output_bytes", 1000}}}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["status"], "succeeded") << r.raw;
  EXPECT_TRUE(r.body["truncated"].get<bool>());
  EXPECT_EQ(r.body["stdout"].get<std::string>(), std::string(1000, 'x'));

  auto small = Run({{"language", "python"}, {"code", "print('x' * 10)"}});
  EXPECT_FALSE(small.body["truncated"].get<bool>()) << small.raw;
}

TEST_F(FoundationTest, FilesAreWrittenAndCollected) {
  auto r =
      Run({{"language", "python"},
           {"code",
            "import os\ndata = open('in/data.txt').read()\nos.makedirs('out')\n"
            "open('out/r.txt', 'w').write(data.upper())\nprint(os.getcwd())"},
           {"files", {{{"path", "in/data.txt"}, {"content_base64", common::Base64Encode("abc")}}}},
           {"collect", {"out/*.txt"}}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["status"], "succeeded") << r.raw;
  ASSERT_EQ(r.body["files"].size(), 1u) << r.raw;
  EXPECT_EQ(r.body["files"][0]["path"], "out/r.txt");
  EXPECT_EQ(r.body["files"][0]["content_base64"], common::Base64Encode("ABC"));
}

TEST_F(FoundationTest, MissingOrWrongTokenIs401) {
  auto none =
      cluster_->Request("POST", "/v1/executions", R"({"language":"python","code":"1"})", "");
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.body["error"]["code"], "UNAUTHORIZED");
  auto wrong = cluster_->Request("GET", "/v1/executions/ex_x", "", "not-a-token");
  EXPECT_EQ(wrong.status, 401);
  EXPECT_EQ(wrong.body["error"]["code"], "UNAUTHORIZED");
}

TEST_F(FoundationTest, BadRequestsGetClearErrors) {
  auto post = [](const std::string& body) {
    return cluster_->Request("POST", "/v1/executions", body);
  };
  auto malformed = post("{\"language\": \"python\", ");
  EXPECT_EQ(malformed.status, 400);
  EXPECT_EQ(malformed.body["error"]["code"], "INVALID_REQUEST");

  auto unknown_field = post(R"({"language":"python","code":"1","colour":"blue"})");
  EXPECT_EQ(unknown_field.status, 400);
  EXPECT_EQ(unknown_field.body["error"]["code"], "INVALID_REQUEST");
  EXPECT_THAT(unknown_field.body["error"]["message"].get<std::string>(), HasSubstr("colour"));

  auto unknown_lang = post(R"({"language":"cobol","code":"1"})");
  EXPECT_EQ(unknown_lang.status, 400);
  EXPECT_EQ(unknown_lang.body["error"]["code"], "INVALID_REQUEST");
  EXPECT_THAT(unknown_lang.body["error"]["message"].get<std::string>(), HasSubstr("cobol"));

  json huge = {{"language", "python"}, {"code", std::string(70000, '#')}};
  auto oversized = post(huge.dump());
  EXPECT_EQ(oversized.status, 400);
  EXPECT_EQ(oversized.body["error"]["code"], "LIMIT_EXCEEDED");

  auto over_max = post(R"({"language":"python","code":"1","limits":{"timeout_ms":999999}})");
  EXPECT_EQ(over_max.status, 400);
  EXPECT_EQ(over_max.body["error"]["code"], "LIMIT_EXCEEDED");

  auto bad_path =
      post(R"({"language":"python","code":"1","files":[{"path":"../x","content_base64":""}]})");
  EXPECT_EQ(bad_path.status, 400);
  EXPECT_EQ(bad_path.body["error"]["code"], "INVALID_REQUEST");

  // The broker still serves normal jobs after all that.
  auto ok = Run({{"language", "python"}, {"code", "print(2)"}});
  EXPECT_EQ(ok.body["stdout"], "2\n") << ok.raw;
}

TEST_F(FoundationTest, NoWaitThenPolling) {
  auto r = cluster_->Request("POST", "/v1/executions",
                             json({{"language", "python"},
                                   {"code", "import time\ntime.sleep(0.3)\nresult = 42"},
                                   {"wait", false}})
                                 .dump());
  ASSERT_EQ(r.status, 202) << r.raw;
  EXPECT_EQ(r.body["status"], "queued");
  std::string id = r.body["id"];
  HttpReply rec;
  bool done = WaitFor(
      [&] {
        rec = cluster_->Request("GET", "/v1/executions/" + id);
        return rec.status == 200 && rec.body["status"] == "succeeded";
      },
      std::chrono::seconds(20));
  ASSERT_TRUE(done) << rec.raw;
  EXPECT_EQ(rec.body["result"], 42);
  EXPECT_EQ(rec.body["id"], id);
  // Another tenant cannot read it.
  auto other = cluster_->Request("GET", "/v1/executions/" + id, "", TestCluster::kOtherToken);
  EXPECT_EQ(other.status, 404);
}

TEST_F(FoundationTest, WorkersListsBothWorkersWithTheirLayers) {
  auto r = cluster_->Request("GET", "/v1/workers", "", TestCluster::kAdminToken);
  ASSERT_EQ(r.status, 200) << r.raw;
  ASSERT_EQ(r.body["workers"].size(), 2u);
  for (const auto& w : r.body["workers"]) {
    EXPECT_THAT(w["runtimes"].get<std::vector<std::string>>(),
                ::testing::UnorderedElementsAre("python", "javascript", "shell"));
    EXPECT_THAT(w["sandbox_layers"].get<std::vector<std::string>>(),
                ::testing::IsSupersetOf({"pid_ns", "net_ns", "seccomp", "landlock"}));
  }
  auto forbidden = cluster_->Request("GET", "/v1/workers");
  EXPECT_EQ(forbidden.status, 403);
}

// Operators tell a daemon's threads apart in top -H and perf by name
// (docs/operations.md, "Troubleshooting").
std::set<std::string> ThreadNames(pid_t pid) {
  std::set<std::string> names;
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  for (const auto& t : std::filesystem::directory_iterator(dir)) {
    std::string comm;
    std::getline(std::ifstream(t.path() / "comm"), comm);
    names.insert(comm);
  }
  return names;
}

TEST_F(FoundationTest, DaemonThreadsAreNamed) {
  EXPECT_THAT(ThreadNames(cluster_->broker(0).pid()),
              ::testing::IsSupersetOf({"kiln-http-io", "kiln-http-work", "kiln-dispatch",
                                       "kiln-gateway", "kiln-events", "kiln-audit", "kiln-follow",
                                       "kiln-unblocker", "kiln-webhooks", "kiln-tools",
                                       "kiln-probe", "kiln-native", "kiln-native-run"}));
  EXPECT_THAT(ThreadNames(cluster_->worker(0).pid()),
              ::testing::IsSupersetOf({"kiln-pool-fill", "kiln-sess-spawn", "kiln-sess-stop"}));
}

TEST_F(FoundationTest, ConcurrentJobsAllComplete) {
  std::vector<std::thread> threads;
  std::vector<HttpReply> replies(12);
  for (int i = 0; i < 12; ++i) {
    threads.emplace_back([&, i] {
      replies[i] =
          Run({{"language", i % 2 ? "python" : "shell"},
               {"code", i % 2 ? "print(" + std::to_string(i) + ")" : "echo " + std::to_string(i)}});
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(replies[i].body["status"], "succeeded") << replies[i].raw;
    EXPECT_EQ(replies[i].body["stdout"], std::to_string(i) + "\n");
  }
}

}  // namespace
}  // namespace kiln::testing
