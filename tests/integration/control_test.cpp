// Job control through a real cluster: cancellation of queued and running
// jobs, and idempotent submits.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "common/base64.hpp"
#include "tests/support/cluster.hpp"

namespace kiln::testing {
namespace {

using nlohmann::json;

class ControlTest : public ::testing::Test {
 protected:
  // One worker with one slot: the second job has to queue.
  static void SetUpTestSuite() {
    cluster_ = TestCluster::Start({.brokers = 1, .workers = 1, .slots = 1});
  }
  static void TearDownTestSuite() { cluster_.reset(); }
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_->DumpLogs();
  }
  static std::string SubmitNoWait(const std::string& code, int timeout_ms = 20000) {
    auto r = cluster_->Submit({{"language", "python"},
                               {"code", code},
                               {"wait", false},
                               {"limits", {{"timeout_ms", timeout_ms}}}});
    EXPECT_EQ(r.status, 202) << r.raw;
    return r.body.value("id", "");
  }
  static json Record(const std::string& id) {
    return cluster_->Request("GET", "/v1/executions/" + id).body;
  }
  static HttpReply CancelJob(const std::string& id,
                             const std::string& token = TestCluster::kToken) {
    return cluster_->Request("POST", "/v1/executions/" + id + "/cancel", "", token);
  }

  static std::unique_ptr<TestCluster> cluster_;
};
std::unique_ptr<TestCluster> ControlTest::cluster_;

TEST_F(ControlTest, CancelsRunningAndQueuedJobs) {
  std::string running = SubmitNoWait("import time\nprint('started', flush=True)\ntime.sleep(30)");
  ASSERT_TRUE(
      WaitFor([&] { return Record(running)["status"] == "running"; }, std::chrono::seconds(10)));
  std::string queued = SubmitNoWait("print('never')");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(Record(queued)["status"], "queued");

  auto q = CancelJob(queued);
  ASSERT_EQ(q.status, 200) << q.raw;
  EXPECT_EQ(q.body["status"], "cancelled");
  EXPECT_EQ(q.body["error"]["code"], "CANCELLED");
  EXPECT_EQ(q.body["stdout"], "");

  auto start = std::chrono::steady_clock::now();
  auto r = CancelJob(running);
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["status"], "cancelled") << r.raw;
  EXPECT_EQ(r.body["end_reason"], "cancelled");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(Record(running)["status"], "cancelled");
  EXPECT_EQ(Record(queued)["status"], "cancelled");

  // The slot is free again; cancelling a finished job changes nothing.
  auto next = cluster_->Submit({{"language", "python"}, {"code", "print(7)"}});
  EXPECT_EQ(next.body["stdout"], "7\n") << next.raw;
  auto again = CancelJob(next.body["id"]);
  EXPECT_EQ(again.status, 200);
  EXPECT_EQ(again.body["status"], "succeeded");
}

TEST_F(ControlTest, CancelChecksTokensAndIds) {
  auto next = cluster_->Submit({{"language", "python"}, {"code", "print(1)"}});
  std::string id = next.body["id"];
  EXPECT_EQ(CancelJob(id, TestCluster::kOtherToken).status, 404);
  EXPECT_EQ(CancelJob(id, "").status, 401);
  EXPECT_EQ(CancelJob("ex_doesnotexist").status, 404);
}

TEST_F(ControlTest, IdempotencyKeyReturnsTheSameJob) {
  json body = {{"language", "python"}, {"code", "import random\nresult = random.random()"}};
  httplib::Headers key = {{"Idempotency-Key", "order-42"}};
  auto first =
      cluster_->Request("POST", "/v1/executions", body.dump(), TestCluster::kToken, 0, key);
  ASSERT_EQ(first.status, 200) << first.raw;
  auto second =
      cluster_->Request("POST", "/v1/executions", body.dump(), TestCluster::kToken, 0, key);
  ASSERT_EQ(second.status, 200) << second.raw;
  EXPECT_EQ(second.body["id"], first.body["id"]);
  EXPECT_EQ(second.body["result"], first.body["result"]);  // one run, not two
  EXPECT_EQ(second.headers.count("Idempotent-Replay"), 1u);

  // Keys are per tenant; a fresh key is a fresh job.
  auto other =
      cluster_->Request("POST", "/v1/executions", body.dump(), TestCluster::kOtherToken, 0, key);
  EXPECT_NE(other.body["id"], first.body["id"]);
  auto fresh = cluster_->Request("POST", "/v1/executions", body.dump(), TestCluster::kToken, 0,
                                 {{"Idempotency-Key", "order-43"}});
  EXPECT_NE(fresh.body["id"], first.body["id"]);

  // A retry while the first is still running gets the same job too.
  json slow = {{"language", "python"},
               {"code", "import time\ntime.sleep(0.5)\nresult = 5"},
               {"wait", false}};
  httplib::Headers k2 = {{"Idempotency-Key", "slow-1"}};
  auto a = cluster_->Request("POST", "/v1/executions", slow.dump(), TestCluster::kToken, 0, k2);
  auto b = cluster_->Request("POST", "/v1/executions", slow.dump(), TestCluster::kToken, 0, k2);
  ASSERT_EQ(a.status, 202) << a.raw;
  ASSERT_EQ(b.status, 202) << b.raw;
  EXPECT_EQ(a.body["id"], b.body["id"]);

  auto bad = cluster_->Request("POST", "/v1/executions", body.dump(), TestCluster::kToken, 0,
                               {{"Idempotency-Key", std::string(200, 'k')}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.body["error"]["code"], "INVALID_REQUEST");
}

// Two brokers share one worker with two slots: each broker sees only its own
// jobs, so the worker refuses what does not fit and the broker queues it
// again — every job runs, none fails for want of a slot.
TEST(MultiBrokerTest, SharedWorkerSlotsNeverFailJobs) {
  auto cluster = TestCluster::Start({.brokers = 2, .workers = 1, .slots = 2});
  std::vector<std::thread> threads;
  std::vector<HttpReply> replies(16);
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&, i] {
      replies[i] = cluster->Submit(
          {{"language", "python"},
           {"code", "import time\ntime.sleep(0.2)\nprint(" + std::to_string(i) + ")"}},
          TestCluster::kToken, i % 2);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(replies[i].body["status"], "succeeded") << replies[i].raw;
    EXPECT_EQ(replies[i].body["stdout"], std::to_string(i) + "\n");
  }
  if (::testing::Test::HasFailure()) std::cerr << cluster->DumpLogs();
}

// A tenant's registered secret and the built-in credential patterns are
// masked in every channel a job's output leaves by, even when the secret is
// printed one character at a time across many output chunks.
TEST(SecretsTest, RegisteredSecretsAndCredentialsAreMaskedEverywhere) {
  const std::string secret = "hunter2-Zq9xK7";
  auto cluster = TestCluster::Start({.brokers = 1, .workers = 1, .tenant_a_secrets = {secret}});
  const std::string code =
      "import sys, time\n"
      "s = 'hunter2-' + 'Zq9xK7'\n"
      "for c in s:\n"
      "    sys.stdout.write(c); sys.stdout.flush(); time.sleep(0.01)\n"
      "print()\n"
      "print('key AKIA' + 'ABCDEFGHIJKLMNOP', file=sys.stderr)\n"
      "result = {'token': s}\n"
      "raise RuntimeError('leaked ' + s)\n";
  auto r = cluster->Submit({{"language", "python"}, {"code", code}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.raw.find(secret), std::string::npos) << r.raw;
  EXPECT_EQ(r.raw.find("AKIAABCDEFGHIJKLMNOP"), std::string::npos) << r.raw;
  EXPECT_EQ(r.body["stdout"], "***\n");
  EXPECT_THAT(r.body["stderr"].get<std::string>(), ::testing::HasSubstr("key ***"));
  EXPECT_EQ(r.body["result"]["token"], "***");
  EXPECT_EQ(r.body["error"]["message"], "leaked ***");
  EXPECT_GE(r.body["redactions"].get<int>(), 4);

  // Collected files leave too: the secret is masked in their contents.
  auto f = cluster->Submit({{"language", "python"},
                            {"code", "open('out.txt', 'w').write('a ' + 'hunter2-' + 'Zq9xK7 b')"},
                            {"collect", json::array({"out.txt"})}});
  ASSERT_EQ(f.status, 200) << f.raw;
  ASSERT_EQ(f.body["files"].size(), 1u) << f.raw;
  auto content = common::Base64Decode(f.body["files"][0]["content_base64"].get<std::string>());
  ASSERT_TRUE(content.ok());
  EXPECT_EQ(*content, "a *** b");
  EXPECT_EQ(f.body["redactions"], 1) << f.raw;

  // Another tenant registered no secret: its output is untouched.
  auto other = cluster->Submit({{"language", "python"}, {"code", "print('hunter2-' + 'Zq9xK7')"}},
                               TestCluster::kOtherToken);
  EXPECT_EQ(other.body["stdout"], secret + "\n") << other.raw;
  EXPECT_EQ(other.body["redactions"], 0);
  if (::testing::Test::HasFailure()) std::cerr << cluster->DumpLogs();
}

}  // namespace
}  // namespace kiln::testing
