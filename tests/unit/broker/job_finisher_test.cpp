// JobFinisher, JobWaiters and the EventBus against a real redis-server: who
// hands a job's terminal record to the broker's waiters. An end this broker
// stores is handed over by the finisher alone (the EventBus does not load it
// again on the broker's own "done" notice); an end someone else stored first
// is loaded once and handed over. No broker process: each test drives the
// stores the way the dispatcher does.
#include "broker/scheduler/job_finisher.hpp"

#include <gtest/gtest.h>

#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "broker/scheduler/event_bus.hpp"
#include "common/clock.hpp"
#include "tests/unit/broker/redis_servers.hpp"

namespace kiln::broker {
namespace {

using namespace std::chrono_literals;

// JobWaiters alone: which "done" notices the EventBus must act on.
TEST(JobWaitersTest, AnEndBeingStoredHereIsNotAwaitedFromElsewhere) {
  JobWaiters waiters;
  EXPECT_FALSE(waiters.AwaitsEndFromElsewhere("ex_1")) << "nobody waits";
  auto watch = waiters.Watch("ex_1", [](const JobRecord&, const std::string*) {});
  EXPECT_TRUE(waiters.AwaitsEndFromElsewhere("ex_1"));
  waiters.Storing("ex_1");
  waiters.Storing("ex_1");  // marks pair up: a second store of the same end
  EXPECT_FALSE(waiters.AwaitsEndFromElsewhere("ex_1"));
  waiters.DoneStoring("ex_1");
  EXPECT_FALSE(waiters.AwaitsEndFromElsewhere("ex_1")) << "one mark is still held";
  waiters.DoneStoring("ex_1");
  EXPECT_TRUE(waiters.AwaitsEndFromElsewhere("ex_1"));
  waiters.DoneStoring("ex_1");  // unpaired: harmless
  EXPECT_TRUE(waiters.AwaitsEndFromElsewhere("ex_1"));

  // A blocked waiter that has been told stays registered until it wakes,
  // but no longer awaits anything.
  auto blocked = waiters.Add("ex_2");
  EXPECT_TRUE(waiters.AwaitsEndFromElsewhere("ex_2"));
  JobRecord done;
  done.id = "ex_2";
  done.status = JobStatus::kSucceeded;
  waiters.Notify(done);
  EXPECT_TRUE(waiters.Waiting("ex_2"));
  EXPECT_FALSE(waiters.AwaitsEndFromElsewhere("ex_2"));
  EXPECT_TRUE(waiters.Wait(blocked, std::chrono::steady_clock::now()).has_value());
}

class JobFinisherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("kiln-finisher");
    redis_ = std::make_unique<RedisServer>(RedisServer::Start(dir_, "r"));
    url_ = "redis://127.0.0.1:" + std::to_string(redis_->port);
    auto pool = RedisPool::Create(url_, 4);
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    pool_ = std::move(*pool);
    ScheduleSettings settings;
    settings.broker_id = "b1";
    settings.lease_ms = 60000;
    settings.session_ttl_ms = 60000;
    jobs_ = std::make_unique<JobStore>(pool_.get(), 3600);
    sched_ = std::make_unique<ScheduleStore>(pool_.get(), settings);
    finisher_ = std::make_unique<JobFinisher>(
        jobs_.get(), sched_.get(), &waiters_, nullptr, nullptr, 1u << 20,
        FinisherHooks{.candidates =
                          [] {
                            return std::vector<WorkerSlots>{{"w1", 4, ",python,"}};
                          },
                      .start = [](const std::vector<StartedJob>&) {},
                      .ack = [](const std::string&, const std::string&) {}});
  }

  void TearDown() override {
    if (bus_thread_.joinable()) {
      bus_thread_.request_stop();
      bus_thread_.join();
    }
    redis_.reset();
    testing::RemoveTree(dir_);
  }

  // The broker's EventBus, subscribed before this returns.
  void StartBus() {
    auto endpoint = RedisEndpoint::Parse(url_);
    ASSERT_TRUE(endpoint.ok()) << endpoint.status().ToString();
    bus_ = std::make_unique<EventBus>(*endpoint, &waiters_, jobs_.get(), [](const std::string&) {});
    bus_thread_ = std::jthread([this](std::stop_token st) { bus_->Run(st); });
    ASSERT_TRUE(testing::WaitFor(
        [&] {
          auto r = pool_->Acquire()->Command({"PUBSUB", "NUMSUB", "{kiln}:events"});
          return r.ok() && r->elements.size() == 2 && r->elements[1].integer == 1;
        },
        10s))
        << "the EventBus never subscribed";
  }

  // A running job on worker w1, as the submit script leaves it.
  JobRecord Running() {
    JobSpec s;
    s.id = "ex_" + std::to_string(++counter_);
    s.tenant = "t1";
    s.language = "python";
    s.code = "print(1)";
    s.limits = {1000, 64, 1000, 1000, 8};
    s.created_ms = common::NowMs();
    auto out = sched_->Submit(s, "", {}, {{"w1", 4, ",python,"}}, common::NowMs());
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    auto rec = jobs_->Load(s.id);
    EXPECT_TRUE(rec.ok()) << rec.status().ToString();
    JobRecord r = rec.ok() ? *rec : JobRecord{};
    EXPECT_EQ(r.status, JobStatus::kRunning);
    return r;
  }

  // Scripts Redis has run since the last ResetStats (EVALSHA and EVAL).
  long long ScriptsRun() {
    auto r = pool_->Acquire()->Command({"INFO", "commandstats"});
    EXPECT_TRUE(r.ok());
    long long n = 0;
    std::istringstream lines(r.ok() ? r->str : "");
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("cmdstat_eval", 0) != 0) continue;  // eval, evalsha
      auto at = line.find("calls=");
      if (at != std::string::npos) n += std::strtoll(line.c_str() + at + 6, nullptr, 10);
    }
    return n;
  }
  void ResetStats() { ASSERT_TRUE(pool_->Acquire()->Command({"CONFIG", "RESETSTAT"}).ok()); }

  std::string dir_;
  std::string url_;
  std::unique_ptr<RedisServer> redis_;
  std::unique_ptr<RedisPool> pool_;
  std::unique_ptr<JobStore> jobs_;
  std::unique_ptr<ScheduleStore> sched_;
  JobWaiters waiters_;
  std::unique_ptr<JobFinisher> finisher_;
  std::unique_ptr<EventBus> bus_;
  std::jthread bus_thread_;
  int counter_ = 0;
};

// The finish script publishes "done"; the EventBus hears it, often before
// the finisher has read the script's answer. The waiter (still registered,
// as a blocked one stays until it wakes) gets the record from the finisher,
// and the EventBus runs no script to load it again.
TEST_F(JobFinisherTest, AnEndStoredHereIsHandedOverWithoutLoadingItAgain) {
  StartBus();
  // The first round teaches Redis the scripts (a NOSCRIPT answer, then EVAL).
  for (int i = 0; i < 6; ++i) {
    JobRecord ended = Running();
    ended.status = JobStatus::kSucceeded;
    ended.result_json = std::to_string(i);  // no output: no stream tail to store
    auto waiter = waiters_.Add(ended.id);
    ResetStats();
    finisher_->Finish(ended, {.worker = "w1"});
    finisher_->Flush();
    // Time for the EventBus to hear "done" and act on it.
    std::this_thread::sleep_for(300ms);
    if (i > 0) {
      EXPECT_EQ(ScriptsRun(), 1) << "the finish script, and nothing to load the record again";
    }
    auto got = waiters_.Wait(waiter, std::chrono::steady_clock::now());
    ASSERT_TRUE(got.has_value()) << "the waiter was not told";
    EXPECT_EQ(got->status, JobStatus::kSucceeded);
    EXPECT_EQ(got->result_json, std::to_string(i));
  }
}

// A watch (an HTTP wait) is handed the record as the finish script stored
// it, serialized once: it answers with those bytes instead of making them again.
TEST_F(JobFinisherTest, AWatchIsHandedTheRecordAsStored) {
  JobRecord ended = Running();
  ended.status = JobStatus::kSucceeded;
  ended.result_json = R"({"answer":42})";
  std::mutex mu;
  std::optional<std::string> handed;
  auto watch = waiters_.Watch(ended.id, [&](const JobRecord& r, const std::string* json) {
    std::lock_guard lock(mu);
    EXPECT_EQ(r.id, ended.id);
    handed = json ? *json : "(none)";
  });
  finisher_->Finish(ended, {.worker = "w1"});
  finisher_->Flush();
  auto stored = pool_->Acquire()->Command({"HGET", "{kiln}:job:" + ended.id, "record"});
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  std::lock_guard lock(mu);
  ASSERT_TRUE(handed.has_value()) << "the watch was not called";
  EXPECT_EQ(*handed, stored->str);
  EXPECT_NE(handed->find(R"("result":{"answer":42})"), std::string::npos) << *handed;
}

// Another broker (or path) stored the end first: this finisher's script finds
// it ended and publishes nothing, so the finisher itself loads the stored
// record for the waiters (the EventBus ignored the first "done" while this
// end was marked as being stored).
TEST_F(JobFinisherTest, AnEndStoredElsewhereFirstReachesTheWaitersOnce) {
  StartBus();
  JobRecord first = Running();
  first.status = JobStatus::kCancelled;
  JobRecord late = first;
  late.status = JobStatus::kSucceeded;
  auto waiter = waiters_.Add(first.id);
  waiters_.Storing(first.id);  // as if our Flush had begun before the other end landed
  auto other = sched_->Finish(first, FinishExpect::kAny, {}, common::NowMs());
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  ASSERT_EQ(other->kind, FinishOutcome::Kind::kStored);
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(waiters_.Wait(waiter, std::chrono::steady_clock::now()).has_value())
      << "the EventBus acted on a \"done\" while this broker was storing the same end";
  waiters_.DoneStoring(first.id);

  waiter = waiters_.Add(first.id);
  finisher_->Finish(late, {.worker = "w1"});
  finisher_->Flush();
  auto got = waiters_.Wait(waiter, std::chrono::steady_clock::now() + 5s);
  ASSERT_TRUE(got.has_value()) << "the waiter never learnt the stored end";
  EXPECT_EQ(got->status, JobStatus::kCancelled) << "the first end stored is the job's end";
}

}  // namespace
}  // namespace kiln::broker
