// Live output over Server-Sent Events, read with a real HTTP client (curl):
// chunks arrive while the job runs, a late subscriber gets a full replay,
// Last-Event-ID resumes, and the chunks add up to the final record.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "tests/support/cluster.hpp"
#include "tests/support/sse_reader.hpp"

namespace kiln::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Reads the events of job `id` through `broker`.
std::vector<SseEvent> ReadEvents(TestCluster& c, const std::string& id, int broker = 0,
                                 const std::string& token = TestCluster::kToken,
                                 const std::string& last_event_id = "") {
  return ReadSseEvents(c.url(broker) + "/v1/executions/" + id + "/events", token, last_event_id);
}

std::string Concat(const std::vector<SseEvent>& events, const std::string& stream) {
  std::string out;
  for (const auto& e : events) {
    if (e.event == "output_chunk" && e.data["stream"] == stream) out += e.data["data"];
  }
  return out;
}

class StreamingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = TestCluster::Start({.brokers = 2, .workers = 1}); }
  static void TearDownTestSuite() { cluster_.reset(); }
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_->DumpLogs();
  }
  static std::unique_ptr<TestCluster> cluster_;
};
std::unique_ptr<TestCluster> StreamingTest::cluster_;

const char* kTicker =
    "import sys, time\n"
    "for i in range(15):\n"
    "    print('tick', i)  # no flush: stdout is line-buffered\n"
    "    if i % 5 == 4: print('err', i, file=sys.stderr)\n"
    "    time.sleep(0.1)\n";

TEST_F(StreamingTest, ChunksArriveLiveThenTheEnd) {
  auto r = cluster_->Submit({{"language", "python"}, {"code", kTicker}, {"wait", false}});
  ASSERT_EQ(r.status, 202) << r.raw;
  std::string id = r.body["id"];
  // Subscribe through broker 1: broker 0 dispatched the job and receives its
  // output; the chunks reach broker 1 through Redis.
  std::vector<SseEvent> events = ReadEvents(*cluster_, id, /*broker=*/1);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.front().event, "execution_start");
  EXPECT_EQ(events.back().event, "execution_end");
  const SseEvent* first_chunk = nullptr;
  for (const auto& e : events) {
    if (e.event == "output_chunk") {
      first_chunk = &e;
      break;
    }
  }
  ASSERT_NE(first_chunk, nullptr);
  // The job runs ~1.5 s; the first line must come long before its end.
  EXPECT_GT(events.back().at - first_chunk->at, std::chrono::milliseconds(700));
  const json& rec = events.back().data;
  EXPECT_EQ(rec["status"], "succeeded");
  EXPECT_EQ(Concat(events, "stdout"), rec["stdout"].get<std::string>());
  EXPECT_EQ(Concat(events, "stderr"), rec["stderr"].get<std::string>());
  EXPECT_THAT(rec["stdout"].get<std::string>(), ::testing::HasSubstr("tick 14\n"));
  // Sequence numbers increase across both streams.
  int64_t last = -1;
  for (const auto& e : events) {
    if (e.event != "output_chunk") continue;
    EXPECT_GT(e.data["seq"].get<int64_t>(), last);
    last = e.data["seq"];
  }
}

// Polling a running job's record shows its output so far (through the
// broker that does not run it: the output comes from Redis), then the end.
TEST_F(StreamingTest, ARunningJobsRecordShowsItsOutputSoFar) {
  const char* code =
      "import sys, time\n"
      "print('first')\n"
      "print('warn', file=sys.stderr)\n"
      "time.sleep(4)\n"
      "print('second')\n";
  auto r = cluster_->Submit({{"language", "python"}, {"code", code}, {"wait", false}});
  ASSERT_EQ(r.status, 202) << r.raw;
  const std::string id = r.body["id"];
  json seen;
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < deadline) {
    auto got = cluster_->Request("GET", "/v1/executions/" + id, "", TestCluster::kToken, 1);
    ASSERT_EQ(got.status, 200) << got.raw;
    if (got.body["status"] != "running" && got.body["status"] != "queued") break;
    if (got.body["status"] == "running" && got.body["stdout"] == "first\n" &&
        got.body["stderr"] == "warn\n") {
      seen = got.body;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE(seen.is_null()) << "never saw the output of the running job";
  EXPECT_EQ(seen["truncated"], false);
  // The end event carries the final record.
  std::vector<SseEvent> events = ReadEvents(*cluster_, id);
  ASSERT_FALSE(events.empty());
  const json& rec = events.back().data;
  EXPECT_EQ(rec["status"], "succeeded") << rec.dump();
  EXPECT_EQ(rec["stdout"], "first\nsecond\n");
}

// A session execution streams the same way (its driver keeps stdout
// line-buffered too), and the chunks add up to the record.
TEST_F(StreamingTest, SessionExecutionStreamsLive) {
  auto r = cluster_->Submit({{"language", "python"},
                             {"code", kTicker},
                             {"session_id", "stream-session-1"},
                             {"wait", false}});
  ASSERT_EQ(r.status, 202) << r.raw;
  std::vector<SseEvent> events = ReadEvents(*cluster_, r.body["id"], /*broker=*/1);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back().event, "execution_end");
  auto first = std::find_if(events.begin(), events.end(),
                            [](const SseEvent& e) { return e.event == "output_chunk"; });
  ASSERT_NE(first, events.end());
  EXPECT_GT(events.back().at - first->at, std::chrono::milliseconds(700));
  const json& rec = events.back().data;
  EXPECT_EQ(rec["status"], "succeeded") << rec.dump();
  EXPECT_EQ(Concat(events, "stdout"), rec["stdout"].get<std::string>());
  EXPECT_EQ(Concat(events, "stderr"), rec["stderr"].get<std::string>());
}

TEST_F(StreamingTest, LateSubscriberGetsTheReplayOnAnyBroker) {
  auto r = cluster_->Submit({{"language", "python"}, {"code", kTicker}});
  ASSERT_EQ(r.status, 200) << r.raw;
  std::string id = r.body["id"];
  for (int broker = 0; broker < 2; ++broker) {
    std::vector<SseEvent> events = ReadEvents(*cluster_, id, broker);
    ASSERT_GE(events.size(), 3u) << "broker " << broker;
    EXPECT_EQ(events.front().event, "execution_start");
    EXPECT_EQ(events.back().event, "execution_end");
    EXPECT_EQ(Concat(events, "stdout"), r.body["stdout"].get<std::string>()) << broker;
    EXPECT_EQ(Concat(events, "stderr"), r.body["stderr"].get<std::string>()) << broker;
  }
}

TEST_F(StreamingTest, LastEventIdResumesAfterTheLastSeenChunk) {
  auto r = cluster_->Submit({{"language", "python"}, {"code", kTicker}});
  ASSERT_EQ(r.status, 200) << r.raw;
  std::string id = r.body["id"];
  auto all = ReadEvents(*cluster_, id);
  std::vector<const SseEvent*> chunks;
  for (const auto& e : all) {
    if (e.event == "output_chunk") chunks.push_back(&e);
  }
  ASSERT_GE(chunks.size(), 4u);
  auto rest = ReadEvents(*cluster_, id, 0, TestCluster::kToken, chunks[1]->id);
  ASSERT_FALSE(rest.empty());
  EXPECT_NE(rest.front().event, "execution_start");
  EXPECT_EQ(rest.front().id, chunks[2]->id);
  EXPECT_EQ(rest.back().event, "execution_end");
  size_t rest_chunks = 0;
  for (const auto& e : rest) rest_chunks += e.event == "output_chunk";
  EXPECT_EQ(rest_chunks, chunks.size() - 2);
}

TEST_F(StreamingTest, OtherTenantsCannotSubscribe) {
  auto r = cluster_->Submit({{"language", "shell"}, {"code", "echo hi"}});
  std::string cmd = "curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer " +
                    std::string(TestCluster::kOtherToken) + "' " + cluster_->url() +
                    "/v1/executions/" + r.body["id"].get<std::string>() + "/events";
  FILE* f = popen(cmd.c_str(), "r");
  char buf[16] = {};
  ASSERT_NE(f, nullptr);
  ASSERT_NE(fgets(buf, sizeof(buf), f), nullptr);
  pclose(f);
  EXPECT_STREQ(buf, "404");
}

}  // namespace
}  // namespace kiln::testing
