// AuditStore against a real redis-server started on a free port for this suite.
#include "broker/store/audit_store.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <mutex>
#include <set>
#include <thread>

#include "broker/job/lifecycle.hpp"
#include "broker/scheduler/audit_writer.hpp"
#include "broker/store/job_store.hpp"
#include "common/audit/sha256.hpp"
#include "common/clock.hpp"
#include "tests/support/process.hpp"

namespace kiln::broker {
namespace {

using testing::ChildProcess;
using ::testing::HasSubstr;

class AuditStoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing::MakeTempDir("kiln-audit"));
    port_ = testing::FreePort();
    redis_ = new ChildProcess(ChildProcess::Start(
        {"/usr/bin/redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1", "--dir",
         *dir_, "--save", "", "--appendonly", "no", "--daemonize", "no"},
        *dir_ + "/redis.log"));
    ASSERT_TRUE(
        testing::WaitFor([] { return testing::CanConnect(port_); }, std::chrono::seconds(10)))
        << testing::ReadFile(*dir_ + "/redis.log");
  }
  static void TearDownTestSuite() {
    delete redis_;
    testing::RemoveTree(*dir_);
    delete dir_;
  }

  void SetUp() override {
    auto pool = RedisPool::Create(Url(), 8);
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    pool_ = std::move(pool).value();
    ASSERT_TRUE(Cmd({"FLUSHALL"}).ok());
  }

  static std::string Url() { return "redis://127.0.0.1:" + std::to_string(port_); }

  common::StatusOr<RedisReply> Cmd(const std::vector<std::string_view>& argv) {
    return pool_->Acquire()->Command(argv);
  }

  static common::AuditEntry Entry(const std::string& job, const std::string& status = "succeeded") {
    common::AuditEntry e;
    e.time_ms = 1700000000000;
    e.tenant = "acme";
    e.runtime = "python";
    e.job_id = job;
    e.code = "print('" + job + "')";
    e.code_sha256 = common::Sha256Hex(e.code);
    e.status = status;
    e.approval = "auto";
    return e;
  }

  std::vector<common::StoredAuditEntry> All(AuditStore& store) {
    auto page = store.Read("", 1000000);
    EXPECT_TRUE(page.ok()) << page.status().ToString();
    return page.ok() ? page->entries : std::vector<common::StoredAuditEntry>{};
  }

  AuditStore::VerifyReport VerifyOk(AuditStore& store, size_t page_size = 500) {
    auto r = store.Verify(page_size);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : AuditStore::VerifyReport{};
  }

  // Replaces the stream by `entries`, keeping their ids (XADD cannot edit in place).
  void Rewrite(const std::vector<common::StoredAuditEntry>& entries) {
    ASSERT_TRUE(Cmd({"DEL", AuditStore::kStreamKey}).ok());
    for (const auto& e : entries) {
      auto r = Cmd(
          {"XADD", AuditStore::kStreamKey, e.id, "entry", e.entry, "prev", e.prev, "hash", e.hash});
      ASSERT_TRUE(r.ok()) << r.status().ToString();
    }
  }

  static inline std::string* dir_ = nullptr;
  static inline int port_ = 0;
  static inline ChildProcess* redis_ = nullptr;
  std::unique_ptr<RedisPool> pool_;
};

TEST_F(AuditStoreTest, ConcurrentAppendsFromTwoBrokersFormOneChain) {
  // Two stores with their own pools stand for two brokers; each is used by
  // four threads at once.
  auto other_pool = RedisPool::Create(Url(), 4);
  ASSERT_TRUE(other_pool.ok());
  AuditStore a(pool_.get(), 0);
  AuditStore b(other_pool->get(), 0);
  constexpr int kThreads = 8;
  constexpr int kEach = 60;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  std::mutex mu;
  std::string first_error;  // guarded by mu
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      AuditStore& store = t % 2 == 0 ? a : b;
      for (int i = 0; i < kEach; ++i) {
        auto id = store.Append(Entry("job-" + std::to_string(t) + "-" + std::to_string(i)));
        if (!id.ok() || id->empty()) {
          std::lock_guard lock(mu);
          if (first_error.empty()) first_error = id.ok() ? "empty id" : id.status().ToString();
          ++failures;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0) << first_error;

  AuditStore::VerifyReport report = VerifyOk(a, 37);  // several pages
  EXPECT_EQ(report.broken, std::nullopt) << report.broken->reason;
  EXPECT_EQ(report.checked, uint64_t{kThreads * kEach});
  std::set<std::string> jobs;
  for (const auto& e : All(a)) {
    jobs.insert(nlohmann::json::parse(e.entry)["job_id"].get<std::string>());
  }
  EXPECT_EQ(jobs.size(), size_t{kThreads * kEach});
  auto head = Cmd({"GET", AuditStore::kHeadKey});
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->str, All(a).back().hash);
}

TEST_F(AuditStoreTest, AppendRetriesOnAStaleHead) {
  AuditStore a(pool_.get(), 0);
  AuditStore b(pool_.get(), 0);
  ASSERT_TRUE(a.Append(Entry("1")).ok());
  ASSERT_TRUE(b.Append(Entry("2")).ok());  // b starts from genesis: one conflict
  ASSERT_TRUE(a.Append(Entry("3")).ok());  // a remembers the head before b's entry
  ASSERT_TRUE(b.Append(Entry("4")).ok());
  auto entries = All(a);
  ASSERT_EQ(entries.size(), 4u);
  for (size_t i = 0; i < entries.size(); ++i) {
    EXPECT_EQ(nlohmann::json::parse(entries[i].entry)["job_id"], std::to_string(i + 1));
  }
  EXPECT_EQ(entries[0].prev, common::kAuditGenesis);
  EXPECT_EQ(VerifyOk(a).broken, std::nullopt);
}

TEST_F(AuditStoreTest, StoredEntryIsTheCanonicalEntryWithItsLinks) {
  AuditStore store(pool_.get(), 0);
  const common::AuditEntry e = Entry("j1");
  auto id = store.Append(e);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  auto page = store.Read("", 10);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->anchor, common::kAuditGenesis);
  ASSERT_EQ(page->entries.size(), 1u);
  const auto& s = page->entries[0];
  EXPECT_EQ(s.id, *id);
  EXPECT_EQ(s.entry, e.Canonical());
  EXPECT_EQ(s.prev, common::kAuditGenesis);
  EXPECT_EQ(s.hash, common::EntryHash(common::kAuditGenesis, e));
  EXPECT_EQ(page->head, s.hash);
}

TEST_F(AuditStoreTest, ReadPagesThroughTheStreamInOrder) {
  AuditStore store(pool_.get(), 0);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(store.Append(Entry(std::to_string(i))).ok());
  std::vector<std::string> jobs;
  auto page = store.Read("", 7);
  ASSERT_TRUE(page.ok());
  while (!page->entries.empty()) {
    EXPECT_LE(page->entries.size(), 7u);
    for (const auto& e : page->entries) {
      jobs.push_back(nlohmann::json::parse(e.entry)["job_id"].get<std::string>());
    }
    page = store.Read(page->entries.back().id, 7);
    ASSERT_TRUE(page.ok());
  }
  ASSERT_EQ(jobs.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(jobs[i], std::to_string(i));
}

TEST_F(AuditStoreTest, AnEditedEntryFailsVerificationAtItsIndex) {
  AuditStore store(pool_.get(), 0);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(store.Append(Entry(std::to_string(i))).ok());
  ASSERT_EQ(VerifyOk(store).broken, std::nullopt);

  auto entries = All(store);
  Rewrite(entries);  // an unchanged rewrite still verifies: the test below is about the edit
  ASSERT_EQ(VerifyOk(store).broken, std::nullopt);

  auto edited = entries;
  auto j = nlohmann::json::parse(edited[7].entry);
  j["status"] = "failed";
  edited[7].entry = common::AuditEntry::CanonicalJson(j);
  Rewrite(edited);
  AuditStore::VerifyReport r = VerifyOk(store, 5);
  ASSERT_TRUE(r.broken.has_value());
  EXPECT_EQ(r.broken->index, 7u);
  EXPECT_EQ(r.broken->id, entries[7].id);
  EXPECT_EQ(r.checked, 7u);
  EXPECT_THAT(r.broken->reason, HasSubstr("hash does not match"));
}

TEST_F(AuditStoreTest, ADeletedEntryFailsVerificationWhereItWas) {
  AuditStore store(pool_.get(), 0);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(store.Append(Entry(std::to_string(i))).ok());
  auto entries = All(store);
  ASSERT_TRUE(Cmd({"XDEL", AuditStore::kStreamKey, entries[5].id}).ok());
  AuditStore::VerifyReport r = VerifyOk(store);
  ASSERT_TRUE(r.broken.has_value());
  EXPECT_EQ(r.broken->index, 5u);
  EXPECT_EQ(r.broken->id, entries[6].id);

  // The oldest entry too: it is not mistaken for a trim.
  ASSERT_TRUE(Cmd({"XDEL", AuditStore::kStreamKey, entries[0].id}).ok());
  r = VerifyOk(store);
  ASSERT_TRUE(r.broken.has_value());
  EXPECT_EQ(r.broken->index, 0u);
  EXPECT_THAT(r.broken->reason, HasSubstr("anchor"));
}

TEST_F(AuditStoreTest, DeletingTheNewestEntriesIsSeenThroughTheHead) {
  AuditStore store(pool_.get(), 0);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(store.Append(Entry(std::to_string(i))).ok());
  auto entries = All(store);
  ASSERT_TRUE(Cmd({"XDEL", AuditStore::kStreamKey, entries[19].id}).ok());
  AuditStore::VerifyReport r = VerifyOk(store);
  ASSERT_TRUE(r.broken.has_value());
  EXPECT_EQ(r.broken->index, 19u);
  EXPECT_EQ(r.checked, 19u);
  EXPECT_THAT(r.broken->reason, HasSubstr("newest entries were deleted"));

  // The whole stream gone: broken at 0.
  ASSERT_TRUE(Cmd({"DEL", AuditStore::kStreamKey}).ok());
  r = VerifyOk(store);
  ASSERT_TRUE(r.broken.has_value());
  EXPECT_EQ(r.broken->index, 0u);

  // A later append chains onto the deleted entry, so the gap shows there instead.
  ASSERT_TRUE(store.Append(Entry("later")).ok());
  r = VerifyOk(store);
  ASSERT_TRUE(r.broken.has_value());
  EXPECT_EQ(r.broken->index, 0u);
  EXPECT_THAT(r.broken->reason, HasSubstr("anchor"));
}

TEST_F(AuditStoreTest, AnEmptyTrailVerifies) {
  AuditStore store(pool_.get(), 0);
  AuditStore::VerifyReport r = VerifyOk(store);
  EXPECT_EQ(r.broken, std::nullopt);
  EXPECT_EQ(r.checked, 0u);
}

TEST_F(AuditStoreTest, VerifyFollowsAppendsThatLandDuringTheWalk) {
  AuditStore store(pool_.get(), 0);
  AuditStore writer(pool_.get(), 0);
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(store.Append(Entry(std::to_string(i))).ok());
  std::atomic<bool> stop{false};
  std::thread appender([&] {
    for (int i = 0; !stop.load(); ++i) {
      if (!writer.Append(Entry("bg-" + std::to_string(i))).ok()) break;
    }
  });
  for (int i = 0; i < 20; ++i) {
    AuditStore::VerifyReport r = VerifyOk(store, 7);
    EXPECT_EQ(r.broken, std::nullopt) << r.broken->index << ": " << r.broken->reason;
    EXPECT_GE(r.checked, 50u);
  }
  stop = true;
  appender.join();
}

TEST_F(AuditStoreTest, TrimmingKeepsTheRestVerifiable) {
  AuditStore store(pool_.get(), 0);
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(store.Append(Entry(std::to_string(i))).ok());
  auto before = All(store);
  auto removed = store.Trim(10);
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(*removed, 20u);
  auto kept = All(store);
  ASSERT_EQ(kept.size(), 10u);
  EXPECT_EQ(kept[0].id, before[20].id);
  AuditStore::VerifyReport r = VerifyOk(store);
  EXPECT_EQ(r.broken, std::nullopt);
  EXPECT_EQ(r.checked, 10u);

  for (int i = 30; i < 35; ++i) ASSERT_TRUE(store.Append(Entry(std::to_string(i))).ok());
  r = VerifyOk(store);
  EXPECT_EQ(r.broken, std::nullopt);
  EXPECT_EQ(r.checked, 15u);

  // Deleting the first kept entry is caught by the anchor the trim recorded.
  ASSERT_TRUE(Cmd({"XDEL", AuditStore::kStreamKey, kept[0].id}).ok());
  r = VerifyOk(store);
  ASSERT_TRUE(r.broken.has_value());
  EXPECT_EQ(r.broken->index, 0u);
}

TEST_F(AuditStoreTest, TrimmingEverythingThenAppendingStillVerifies) {
  AuditStore store(pool_.get(), 0);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(store.Append(Entry(std::to_string(i))).ok());
  auto removed = store.Trim(0);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, 5u);
  EXPECT_EQ(VerifyOk(store).checked, 0u);
  ASSERT_TRUE(store.Append(Entry("after")).ok());
  AuditStore::VerifyReport r = VerifyOk(store);
  EXPECT_EQ(r.broken, std::nullopt);
  EXPECT_EQ(r.checked, 1u);
}

TEST_F(AuditStoreTest, RetentionTrimsOnAppendAndKeepsTheChainVerifiable) {
  AuditStore store(pool_.get(), 50);
  for (int i = 0; i < 400; ++i) ASSERT_TRUE(store.Append(Entry(std::to_string(i))).ok());
  auto len = Cmd({"XLEN", AuditStore::kStreamKey});
  ASSERT_TRUE(len.ok());
  EXPECT_GE(len->integer, 50);
  EXPECT_LT(len->integer, 400);
  AuditStore::VerifyReport r = VerifyOk(store);
  EXPECT_EQ(r.broken, std::nullopt);
  EXPECT_EQ(r.checked, static_cast<uint64_t>(len->integer));
  auto anchor = Cmd({"GET", AuditStore::kAnchorKey});
  ASSERT_TRUE(anchor.ok());
  EXPECT_NE(anchor->str, common::kAuditGenesis);
}

TEST_F(AuditStoreTest, OnlyIfPendingAppendsOnceAndClearsThePendingJob) {
  AuditStore store(pool_.get(), 0);
  ASSERT_TRUE(Cmd({"ZADD", AuditStore::kPendingKey, "1", "j1"}).ok());
  auto first = store.Append(Entry("j1"), /*only_if_pending=*/true);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_FALSE(first->empty());
  EXPECT_EQ(Cmd({"ZCARD", AuditStore::kPendingKey})->integer, 0);
  // A second writer (another broker's sweep) finds it done: no second entry.
  auto again = store.Append(Entry("j1"), true);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, "");
  auto never = store.Append(Entry("j2"), true);
  ASSERT_TRUE(never.ok());
  EXPECT_EQ(*never, "");
  ASSERT_EQ(All(store).size(), 1u);
  EXPECT_EQ(VerifyOk(store).checked, 1u);
}

TEST_F(AuditStoreTest, AppendManyChainsABatchAndGoesOnFromAnotherBrokersHead) {
  AuditStore a(pool_.get(), 0);
  AuditStore b(pool_.get(), 0);
  ASSERT_TRUE(a.Append(Entry("1")).ok());
  ASSERT_TRUE(b.Append(Entry("2")).ok());  // a's remembered head is stale now
  auto ids = a.AppendMany({Entry("3"), Entry("4"), Entry("5")});
  ASSERT_EQ(ids.size(), 3u);
  auto entries = All(a);
  ASSERT_EQ(entries.size(), 5u);
  for (size_t i = 0; i < entries.size(); ++i) {
    EXPECT_EQ(nlohmann::json::parse(entries[i].entry)["job_id"], std::to_string(i + 1));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_TRUE(ids[i].ok()) << ids[i].status().ToString();
    EXPECT_EQ(*ids[i], entries[i + 2].id);
  }
  EXPECT_EQ(VerifyOk(a).checked, 5u);
  // And a's next batch starts from the head it just wrote.
  ASSERT_TRUE(a.AppendMany({Entry("6"), Entry("7")})[1].ok());
  EXPECT_EQ(VerifyOk(a).checked, 7u);
}

TEST_F(AuditStoreTest, AppendManySkipsJobsNoLongerPendingAndChainsTheRest) {
  AuditStore store(pool_.get(), 0);
  ASSERT_TRUE(Cmd({"ZADD", AuditStore::kPendingKey, "1", "j1", "1", "j3", "1", "j4"}).ok());
  auto ids = store.AppendMany({Entry("j1"), Entry("j2"), Entry("j3"), Entry("j4")},
                              /*only_if_pending=*/true);
  ASSERT_EQ(ids.size(), 4u);
  for (const auto& id : ids) ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_FALSE(ids[0]->empty());
  EXPECT_EQ(*ids[1], "");  // written by another broker, or never ended here
  EXPECT_FALSE(ids[2]->empty());
  EXPECT_FALSE(ids[3]->empty());
  auto entries = All(store);
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(nlohmann::json::parse(entries[1].entry)["job_id"], "j3");
  EXPECT_EQ(VerifyOk(store).checked, 3u);
  EXPECT_EQ(Cmd({"ZCARD", AuditStore::kPendingKey})->integer, 0);
}

TEST_F(AuditStoreTest, AppendManyAnswersEveryEntryWhenRedisIsAway) {
  auto dead = RedisPool::Create("redis://127.0.0.1:" + std::to_string(testing::FreePort()), 1);
  ASSERT_TRUE(dead.ok());
  AuditStore store(dead->get(), 0);
  auto ids = store.AppendMany({Entry("x1"), Entry("x2")}, true);
  ASSERT_EQ(ids.size(), 2u);
  for (const auto& id : ids) {
    EXPECT_FALSE(id.ok());
    EXPECT_EQ(id.status().code(), common::Code::kUnavailable) << id.status().ToString();
  }
  EXPECT_THAT(ids[1].status().message(), HasSubstr("x2"));
}

// Entries that queued up while the writer was busy go out together, in
// order, one chain, in a few round trips rather than one each.
TEST_F(AuditStoreTest, TheWriterAppendsAQueueInOrderInFewRoundTrips) {
  AuditStore store(pool_.get(), 0);
  JobStore jobs(pool_.get(), 3600);
  AuditWriter writer(&store, &jobs, nullptr);
  constexpr int kJobs = 150;  // more than two AppendMany batches
  for (int i = 0; i < kJobs; ++i) {
    JobSpec spec;
    spec.id = "ex_q" + std::to_string(i);
    spec.tenant = "acme";
    spec.language = "python";
    spec.code = "print(" + std::to_string(i) + ")";
    spec.created_ms = common::NowMs();
    JobRecord record = JobLifecycle::Begin(spec, {.event = JobEvent::kRefuse,
                                                  .now_ms = common::NowMs(),
                                                  .code = common::Code::kSecurityBlocked,
                                                  .detail = "blocked"})
                           ->record;
    ASSERT_TRUE(jobs.CreateEnded(spec, record).ok());
    writer.Add(record, &spec, "none");
  }
  // Reads of client connections Redis has served: one per round trip that
  // arrives whole (a large pipeline takes a few).
  auto reads = [&] {
    auto info = Cmd({"INFO", "stats"});
    EXPECT_TRUE(info.ok());
    const std::string key = "total_reads_processed:";
    const size_t at = info.ok() ? info->str.find(key) : std::string::npos;
    return at == std::string::npos ? uint64_t{0} : std::stoull(info->str.substr(at + key.size()));
  };
  const uint64_t before = reads();
  {
    // Run() drains what is queued before it honours the stop.
    std::jthread run([&](std::stop_token st) { writer.Run(st); });
    run.request_stop();
  }
  const uint64_t used = reads() - before;
  EXPECT_GT(used, 0u);
  EXPECT_LT(used, uint64_t{kJobs / 3}) << "round trips";
  auto entries = All(store);
  ASSERT_EQ(entries.size(), size_t{kJobs});
  for (int i = 0; i < kJobs; ++i) {
    EXPECT_EQ(nlohmann::json::parse(entries[i].entry)["job_id"], "ex_q" + std::to_string(i));
  }
  EXPECT_EQ(VerifyOk(store).checked, size_t{kJobs});
  EXPECT_EQ(Cmd({"ZCARD", AuditStore::kPendingKey})->integer, 0);
}

// A broker stored a job's end and died before its audit append: the id stays
// pending in Redis, and any broker's sweep writes the entry, exactly once.
TEST_F(AuditStoreTest, SweepWritesTheEntriesABrokerDidNot) {
  AuditStore store(pool_.get(), 0);
  JobStore jobs(pool_.get(), 3600);
  JobSpec spec;
  spec.id = "ex_orphan";
  spec.tenant = "acme";
  spec.language = "python";
  spec.code = "print('left behind')";
  spec.created_ms = common::NowMs() - 1000;
  JobRecord record = JobLifecycle::Begin(spec, {.event = JobEvent::kRefuse,
                                                .now_ms = common::NowMs() - 500,
                                                .code = common::Code::kSecurityBlocked,
                                                .detail = "blocked by rule x"})
                         ->record;
  ASSERT_TRUE(jobs.CreateEnded(spec, record).ok());
  // A pending id whose record expired before anyone wrote its entry.
  ASSERT_TRUE(Cmd({"ZADD", AuditStore::kPendingKey, "1", "ex_gone"}).ok());
  EXPECT_EQ(Cmd({"ZCARD", AuditStore::kPendingKey})->integer, 2);

  // Not yet: the owning broker may still be writing it.
  AuditWriter patient(&store, &jobs, nullptr, {.after = std::chrono::minutes(1)});
  EXPECT_EQ(patient.Sweep(), 0u);
  EXPECT_TRUE(All(store).empty());

  AuditWriter broker_a(&store, &jobs, nullptr, {.after = std::chrono::milliseconds(0)});
  AuditWriter broker_b(&store, &jobs, nullptr, {.after = std::chrono::milliseconds(0)});
  EXPECT_EQ(broker_a.Sweep(), 1u);
  EXPECT_EQ(broker_b.Sweep(), 0u);
  EXPECT_EQ(broker_a.Sweep(), 0u);
  auto entries = All(store);
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_THAT(entries[0].entry, HasSubstr("\"job_id\":\"ex_orphan\""));
  EXPECT_THAT(entries[0].entry, HasSubstr("\"status\":\"rejected\""));
  EXPECT_EQ(Cmd({"ZCARD", AuditStore::kPendingKey})->integer, 0);  // ex_gone dropped too
  EXPECT_EQ(VerifyOk(store).checked, 1u);

  // The normal path: the broker's own write after the end, then nothing to sweep.
  spec.id = "ex_normal";
  record.id = "ex_normal";
  ASSERT_TRUE(jobs.CreateEnded(spec, record).ok());
  std::jthread run([&](std::stop_token st) { broker_a.Run(st); });
  broker_a.Add(record, &spec, "none");
  ASSERT_TRUE(testing::WaitFor([&] { return All(store).size() == 2; }, std::chrono::seconds(10)));
  run.request_stop();
  run.join();
  EXPECT_EQ(broker_b.Sweep(), 0u);
  EXPECT_EQ(All(store).size(), 2u);
}

// A refused submission is kept as an excerpt: in the job hash and in its
// audit entry (written here by a sweep, from what Redis holds), with the
// digests of the whole submission.
TEST_F(AuditStoreTest, RefusedSubmissionIsKeptAsAnExcerpt) {
  AuditStore store(pool_.get(), 0);
  JobStore jobs(pool_.get(), 3600);
  JobSpec spec;
  spec.id = "ex_big";
  spec.tenant = "acme";
  spec.language = "python";
  spec.code = "import ctypes\n" + std::string(1 << 20, '#');
  spec.input_json = R"({"k":"secret-ish"})";
  spec.env = {{"TOKEN", "hunter2-hunter2"}};
  spec.files = {{"data.bin", std::string(1 << 16, 'd')}};
  spec.created_ms = common::NowMs() - 1000;
  JobRecord record = JobLifecycle::Begin(spec, {.event = JobEvent::kRefuse,
                                                .now_ms = common::NowMs() - 500,
                                                .code = common::Code::kSecurityBlocked,
                                                .detail = "blocked by rule python-ctypes"})
                         ->record;
  ASSERT_TRUE(jobs.CreateEnded(spec, record).ok());  // given the whole spec: keeps the excerpt
  auto stored = Cmd({"HGET", JobStore::JobKey("ex_big"), "spec"});
  ASSERT_TRUE(stored.ok());
  EXPECT_LT(stored->str.size(), 6000u);
  EXPECT_EQ(stored->str.find("hunter2"), std::string::npos);
  EXPECT_EQ(stored->str.find("secret-ish"), std::string::npos);
  auto kept = jobs.LoadSpec("ex_big");
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  ASSERT_TRUE(kept->excerpt_of.has_value());
  EXPECT_EQ(kept->excerpt_of->code_bytes, spec.code.size());

  AuditWriter sweeper(&store, &jobs, nullptr, {.after = std::chrono::milliseconds(0)});
  EXPECT_EQ(sweeper.Sweep(), 1u);
  auto entries = All(store);
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_LT(entries[0].entry.size(), 6000u);
  auto e = common::AuditEntry::FromJson(nlohmann::json::parse(entries[0].entry));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->code_sha256, common::Sha256Hex(spec.code)) << "the chain attests the whole code";
  EXPECT_EQ(e->input_sha256, common::Sha256Hex(spec.input_json));
  EXPECT_EQ(e->code_bytes, spec.code.size());
  EXPECT_THAT(e->code, ::testing::StartsWith("import ctypes\n####"));
  EXPECT_THAT(e->code, HasSubstr("[kiln: excerpt: the first 4096 of 1048590 bytes"));
  EXPECT_EQ(VerifyOk(store).checked, 1u);
}

TEST(MakeAuditEntry, DigestsAndSummarisesTheJob) {
  JobSpec spec;
  spec.id = "j9";
  spec.tenant = "acme";
  spec.language = "shell";
  spec.code = "yes | head -n 1000";
  spec.session_id = "s1";
  spec.input_json = R"({"a":1})";
  JobRecord rec;
  rec.status = JobStatus::kSucceeded;
  rec.stdout_data = std::string(2000, 'y');
  rec.stderr_data = "warn";
  rec.exit_code = 0;
  rec.duration_ms = 12.6;
  rec.redactions = 3;
  rec.worker = "w7";
  rec.warnings = {"shell-network"};
  rec.finished_ms = 1700000000123;
  common::AuditEntry e = MakeAuditEntry(spec, rec, "admin:ann");
  EXPECT_EQ(e.job_id, "j9");
  EXPECT_EQ(e.tenant, "acme");
  EXPECT_EQ(e.runtime, "shell");
  EXPECT_EQ(e.session_id, "s1");
  EXPECT_EQ(e.code, spec.code);
  EXPECT_EQ(e.code_sha256, common::Sha256Hex(spec.code));
  EXPECT_EQ(e.input_sha256, common::Sha256Hex(spec.input_json));
  EXPECT_EQ(e.output_sha256, common::OutputDigest(rec.stdout_data, "warn", ""));
  EXPECT_EQ(e.stdout_head, std::string(500, 'y'));
  EXPECT_EQ(e.status, "succeeded");
  EXPECT_EQ(e.exit_code, 0);
  EXPECT_EQ(e.duration_ms, 13);
  EXPECT_EQ(e.approval, "admin:ann");
  EXPECT_EQ(e.redactions, 3u);
  EXPECT_EQ(e.worker, "w7");
  EXPECT_EQ(e.warnings, std::vector<std::string>{"shell-network"});
  EXPECT_EQ(e.time_ms, 1700000000123);
  EXPECT_FALSE(e.code_bytes.has_value()) << "the whole code: no excerpt";
}

}  // namespace
}  // namespace kiln::broker
