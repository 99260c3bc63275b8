// OutputFollower against a real redis-server: chunks in order then the end,
// ends learnt from JobWaiters or from the status check, readers at
// different places in one stream, and a reader without room that costs
// nothing until it has room again.
#include "broker/stream/output_follower.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "common/clock.hpp"
#include "tests/support/process.hpp"

namespace kiln::broker {
namespace {

using kiln::testing::CanConnect;
using kiln::testing::ChildProcess;
using kiln::testing::FreePort;
using kiln::testing::MakeTempDir;
using kiln::testing::RemoveTree;
using kiln::testing::WaitFor;
using namespace std::chrono_literals;

// Records what the follower hands it; `room` says whether it takes more.
class TestReader : public OutputFollower::Reader {
 public:
  size_t Buffered() override { return room ? 0 : 1; }
  bool HasRoom() override { return room; }
  void OnChunks(std::vector<JobStore::StoredChunk>& chunks) override {
    std::lock_guard lock(mu);
    for (auto& c : chunks) data += c.chunk.data;
    ++batches;
  }
  bool OnEnd(const JobRecord& r) override {
    std::lock_guard lock(mu);
    ++end_offers;
    if (decline_end) return false;
    end = JobStatusName(r.status);
    end_address = r.stdout_data.data();  // compared, never dereferenced
    ++last_calls;
    return true;
  }
  void OnError(const common::Status& st) override {
    std::lock_guard lock(mu);
    error = std::string(common::CodeName(st.code()));
    ++last_calls;
  }
  std::string Data() {
    std::lock_guard lock(mu);
    return data;
  }
  std::string End() {
    std::lock_guard lock(mu);
    return end;
  }
  std::string Error() {
    std::lock_guard lock(mu);
    return error;
  }

  std::atomic<bool> room{true};
  std::atomic<bool> decline_end{false};  // OnEnd says not now
  int end_offers = 0;
  std::mutex mu;
  std::string data, end, error;
  const void* end_address = nullptr;
  int batches = 0;
  int last_calls = 0;
};

class OutputFollowerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = MakeTempDir("kiln-follow");
    port_ = FreePort();
    redis_ = new ChildProcess(
        ChildProcess::Start({"/usr/bin/redis-server", "--port", std::to_string(port_), "--bind",
                             "127.0.0.1", "--dir", dir_, "--save", "", "--appendonly", "no"},
                            dir_ + "/redis.log"));
    ASSERT_TRUE(WaitFor([] { return CanConnect(port_); }, 10s));
  }
  static void TearDownTestSuite() {
    delete redis_;
    RemoveTree(dir_);
  }
  void SetUp() override {
    const std::string url = "redis://127.0.0.1:" + std::to_string(port_);
    auto pool = RedisPool::Create(url, 2);
    ASSERT_TRUE(pool.ok());
    pool_ = std::move(*pool);
    ASSERT_TRUE(pool_->Acquire()->Command({"FLUSHALL"}).ok());
    jobs_ = std::make_unique<JobStore>(pool_.get(), 3600);
    follower_ =
        std::make_unique<OutputFollower>(*RedisEndpoint::Parse(url), jobs_.get(), &waiters_);
    thread_ = std::jthread([this](std::stop_token st) { follower_->Run(st); });
  }
  void TearDown() override {
    thread_.request_stop();
    thread_.join();
  }

  JobRecord Record(const std::string& id, JobStatus status) {
    JobRecord r;
    r.id = id;
    r.status = status;
    r.language = "python";
    r.tenant = "t";
    return r;
  }
  void Put(const std::string& id, JobStatus status) { PutRecord(Record(id, status)); }
  void PutRecord(const JobRecord& r) {
    auto c = pool_->Acquire();
    ASSERT_TRUE(c->Command({"HSET", JobStore::JobKey(r.id), "record", r.ToJson().dump(), "status",
                            JobStatusName(r.status)})
                    .ok());
  }
  // Output is stored only while its job runs, where it continues the stream.
  void Chunk(const std::string& id, uint64_t seq, const std::string& data) {
    uint64_t& offset = offsets_[id];
    ASSERT_TRUE(
        jobs_->AppendChunk({id, common::protocol::Stream::kStdout, seq, offset, data}).ok());
    offset += data.size();
  }
  std::map<std::string, uint64_t> offsets_;

  static inline std::string dir_;
  static inline int port_ = 0;
  static inline ChildProcess* redis_ = nullptr;
  std::unique_ptr<RedisPool> pool_;
  std::unique_ptr<JobStore> jobs_;
  JobWaiters waiters_;
  std::unique_ptr<OutputFollower> follower_;
  std::jthread thread_;
};

TEST_F(OutputFollowerTest, ChunksInOrderThenTheEndFromTheNotice) {
  Put("j1", JobStatus::kRunning);
  Chunk("j1", 0, "a");
  auto r = std::make_shared<TestReader>();
  follower_->Follow("j1", "0", r);
  ASSERT_TRUE(WaitFor([&] { return r->Data() == "a"; }, 5s));
  for (int i = 1; i <= 40; ++i) Chunk("j1", i, std::to_string(i % 10));
  std::string want = "a";
  for (int i = 1; i <= 40; ++i) want += std::to_string(i % 10);
  ASSERT_TRUE(WaitFor([&] { return r->Data() == want; }, 5s)) << r->Data();
  EXPECT_EQ(r->End(), "");
  Put("j1", JobStatus::kSucceeded);
  waiters_.Notify(Record("j1", JobStatus::kSucceeded));
  ASSERT_TRUE(WaitFor([&] { return r->End() == "succeeded"; }, 5s));
  EXPECT_EQ(r->last_calls, 1);
  EXPECT_EQ(follower_->size(), 0u);
  EXPECT_EQ(waiters_.size(), 0u);  // its watch is gone
}

// A blocking read waits for output only: an end notice, or a new reader,
// arriving meanwhile cuts it short (CLIENT UNBLOCK) instead of waiting out
// the block (5 s here, 50 ms by default).
TEST_F(OutputFollowerTest, AnEndOrANewReaderCutsABlockingReadShort) {
  OutputFollower slow(*RedisEndpoint::Parse("redis://127.0.0.1:" + std::to_string(port_)),
                      jobs_.get(), &waiters_, OutputFollower::Options{.block = 5s});
  std::jthread t([&](std::stop_token st) { slow.Run(st); });
  Put("jb", JobStatus::kRunning);
  Chunk("jb", 0, "a");
  auto r = std::make_shared<TestReader>();
  slow.Follow("jb", "0", r);
  ASSERT_TRUE(WaitFor([&] { return r->Data() == "a"; }, 5s));
  std::this_thread::sleep_for(200ms);  // the follower blocks on jb's stream now

  Put("jc", JobStatus::kRunning);
  Chunk("jc", 0, "c");
  auto c = std::make_shared<TestReader>();
  auto start = std::chrono::steady_clock::now();
  slow.Follow("jc", "0", c);
  ASSERT_TRUE(WaitFor([&] { return c->Data() == "c"; }, 5s));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s) << "the new reader waited out the block";
  std::this_thread::sleep_for(200ms);

  Put("jb", JobStatus::kSucceeded);
  start = std::chrono::steady_clock::now();
  waiters_.Notify(Record("jb", JobStatus::kSucceeded));
  ASSERT_TRUE(WaitFor([&] { return r->End() == "succeeded"; }, 8s));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s) << "the end waited out the block";
  t.request_stop();
}

TEST_F(OutputFollowerTest, EndFoundByTheStatusCheckWithoutANotice) {
  Put("j2", JobStatus::kRunning);
  Chunk("j2", 0, "x");
  Chunk("j2", 1, "y");
  Put("j2", JobStatus::kSucceeded);  // ended before anyone followed it
  Chunk("j2", 2, "after the end");   // never stored
  auto r = std::make_shared<TestReader>();
  follower_->Follow("j2", "0", r);
  ASSERT_TRUE(WaitFor([&] { return r->End() == "succeeded"; }, 5s));
  EXPECT_EQ(r->Data(), "xy");  // every chunk before the end
}

TEST_F(OutputFollowerTest, ReadersAtDifferentPlacesEachGetTheirRest) {
  Put("j3", JobStatus::kRunning);
  for (int i = 0; i < 50; ++i) Chunk("j3", i, "<" + std::to_string(i) + ">");
  Put("j3", JobStatus::kSucceeded);
  // The id of entry 30, to resume after it.
  auto c = pool_->Acquire();
  auto range = c->Command({"XRANGE", JobStore::OutputKey("j3"), "-", "+", "COUNT", "31"});
  ASSERT_TRUE(range.ok());
  const std::string after30 = range->elements.at(30).elements.at(0).str;
  auto all = std::make_shared<TestReader>();
  auto tail = std::make_shared<TestReader>();
  follower_->Follow("j3", "0", all);
  follower_->Follow("j3", after30, tail);
  ASSERT_TRUE(WaitFor([&] { return !all->End().empty() && !tail->End().empty(); }, 5s));
  std::string want_all, want_tail;
  for (int i = 0; i < 50; ++i) {
    want_all += "<" + std::to_string(i) + ">";
    if (i > 30) want_tail += "<" + std::to_string(i) + ">";
  }
  EXPECT_EQ(all->Data(), want_all);
  EXPECT_EQ(tail->Data(), want_tail);
}

TEST_F(OutputFollowerTest, AReaderWithoutRoomIsNotReadForUntilWoken) {
  Put("j4", JobStatus::kRunning);
  auto slow = std::make_shared<TestReader>();
  slow->room = false;
  auto fast = std::make_shared<TestReader>();
  auto slow_id = follower_->Follow("j4", "0", slow);
  follower_->Follow("j4", "0", fast);
  for (int i = 0; i < 100; ++i) Chunk("j4", i, "z");
  ASSERT_TRUE(WaitFor([&] { return fast->Data().size() == 100; }, 5s));
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(slow->Data(), "");  // nothing buffered for it
  slow->room = true;
  follower_->Wake(slow_id);
  ASSERT_TRUE(WaitFor([&] { return slow->Data().size() == 100; }, 5s));
}

// A reader may decline its end (its tenant's unread budget is full): it is
// offered the end again until it takes it, exactly once, and the other
// readers of the job are not held back meanwhile.
TEST_F(OutputFollowerTest, ADeclinedEndIsOfferedAgainUntilTaken) {
  Put("j9", JobStatus::kRunning);
  Chunk("j9", 0, "q");
  Put("j9", JobStatus::kSucceeded);
  auto declining = std::make_shared<TestReader>();
  declining->decline_end = true;
  auto other = std::make_shared<TestReader>();
  follower_->Follow("j9", "0", declining);
  follower_->Follow("j9", "0", other);
  ASSERT_TRUE(WaitFor([&] { return other->End() == "succeeded"; }, 5s));
  ASSERT_TRUE(WaitFor(
      [&] {
        std::lock_guard lock(declining->mu);
        return declining->end_offers >= 3;
      },
      5s));
  EXPECT_EQ(declining->End(), "");
  EXPECT_EQ(declining->Data(), "q");  // its chunks came; only the end waits
  EXPECT_EQ(follower_->size(), 1u);
  declining->decline_end = false;
  ASSERT_TRUE(WaitFor([&] { return declining->End() == "succeeded"; }, 5s));
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(declining->last_calls, 1);
  EXPECT_EQ(follower_->size(), 0u);
}

// A terminal record holds up to max_output_bytes of output: the readers of
// one job hold one copy of it, however many there are and however long they
// wait for room (20 stalled readers of a 10 MiB job used to cost 200 MiB),
// whether the end came from the notice or from the status check.
TEST_F(OutputFollowerTest, ReadersOfAJobShareOneCopyOfItsEnd) {
  for (bool notice : {true, false}) {
    const std::string id = notice ? "j6" : "j7";
    // Output on the heap (past the short-string buffer): its address names the copy.
    JobRecord ended = Record(id, JobStatus::kSucceeded);
    ended.stdout_data = std::string(4096, 'o');
    Put(id, JobStatus::kRunning);
    Chunk(id, 0, "out");
    if (!notice) PutRecord(ended);
    std::vector<std::shared_ptr<TestReader>> readers;
    std::vector<OutputFollower::Id> ids;
    for (int i = 0; i < 3; ++i) {
      readers.push_back(std::make_shared<TestReader>());
      readers.back()->room = false;
      ids.push_back(follower_->Follow(id, "0", readers.back()));
    }
    if (notice) {
      PutRecord(ended);
      waiters_.Notify(ended);
    }
    std::this_thread::sleep_for(300ms);  // the end is known, the readers have no room
    for (size_t i = 0; i < readers.size(); ++i) {
      readers[i]->room = true;
      follower_->Wake(ids[i]);
    }
    ASSERT_TRUE(WaitFor(
        [&] {
          for (auto& r : readers) {
            if (r->End().empty()) return false;
          }
          return true;
        },
        5s));
    for (auto& r : readers) {
      EXPECT_EQ(r->Data(), "out");
      EXPECT_EQ(r->End(), "succeeded");
      EXPECT_EQ(r->end_address, readers[0]->end_address) << (notice ? "notice" : "check");
    }
  }
}

TEST_F(OutputFollowerTest, MissingJobIsNotFoundAndUnfollowStopsDelivery) {
  auto r = std::make_shared<TestReader>();
  follower_->Follow("nope", "0", r);
  ASSERT_TRUE(WaitFor([&] { return r->Error() == "NOT_FOUND"; }, 5s));

  Put("j5", JobStatus::kRunning);
  auto gone = std::make_shared<TestReader>();
  auto id = follower_->Follow("j5", "0", gone);
  Chunk("j5", 0, "before");
  ASSERT_TRUE(WaitFor([&] { return gone->Data() == "before"; }, 5s));
  follower_->Unfollow(id);
  ASSERT_TRUE(WaitFor([&] { return follower_->size() == 0; }, 5s));
  Chunk("j5", 1, "after");
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(gone->Data(), "before");
  EXPECT_EQ(waiters_.size(), 0u);
}

}  // namespace
}  // namespace kiln::broker

namespace kiln::broker {
namespace {

// The stored stream of a job: in order, without gaps, never after the end,
// and completed from the record at the end.
TEST_F(OutputFollowerTest, OutputIsStoredContiguouslyAndCompletedFromTheRecord) {
  using common::protocol::Stream;
  Put("k1", JobStatus::kRunning);
  auto stored = [&] {
    std::string out, err;
    auto c = pool_->Acquire();
    auto chunks = JobStore::ReadChunks(c.operator->(), "k1", "0", -1);
    EXPECT_TRUE(chunks.ok());
    uint64_t last_seq = 0;
    bool first = true;
    for (const auto& sc : *chunks) {
      EXPECT_TRUE(first || sc.chunk.seq > last_seq);
      first = false;
      last_seq = sc.chunk.seq;
      std::string& s = sc.chunk.stream == Stream::kStdout ? out : err;
      EXPECT_EQ(sc.chunk.offset, s.size());
      s += sc.chunk.data;
    }
    return std::make_pair(out, err);
  };
  auto r = jobs_->AppendOutput({JobOutput{"k1",
                                          {{"k1", Stream::kStdout, 0, 0, "hello "},
                                           {"k1", Stream::kStdout, 1, 20, "gap"},  // dropped
                                           {"k1", Stream::kStderr, 2, 0, "oops"},
                                           {"k1", Stream::kStdout, 3, 3, "lo world"}}}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_TRUE((*r)[0].running);
  EXPECT_EQ((*r)[0].stdout_bytes, 11u);  // "hello world": the overlap kept once
  EXPECT_EQ((*r)[0].stderr_bytes, 4u);
  EXPECT_EQ(stored(), std::make_pair(std::string("hello world"), std::string("oops")));
  // The end: what the stream lacks comes from the record, in entries of at
  // most a chunk, before the record is stored.
  const std::string rest(100 << 10, 'r');
  JobRecord end = Record("k1", JobStatus::kSucceeded);
  end.stdout_data = "hello world" + rest;
  end.stderr_data = "oops!";
  ASSERT_TRUE(jobs_->AppendOutput({JobStore::OutputTail(end, (*r)[0])}).ok());
  // Told nothing was stored: the whole output goes again, and Redis keeps
  // only what continues each stream.
  ASSERT_TRUE(jobs_->AppendOutput({JobStore::OutputTail(end, StoredOutput{})}).ok());
  auto c = pool_->Acquire();
  auto chunks = JobStore::ReadChunks(c.operator->(), "k1", "0", -1);
  ASSERT_TRUE(chunks.ok());
  for (const auto& sc : *chunks) EXPECT_LE(sc.chunk.data.size(), common::protocol::kMaxChunkBytes);
  EXPECT_EQ(stored(), std::make_pair("hello world" + rest, std::string("oops!")));
  Put("k1", JobStatus::kSucceeded);
  r = jobs_->AppendOutput({JobOutput{"k1", {{"k1", Stream::kStdout, 9, 102411, "late"}}}});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE((*r)[0].running);
  EXPECT_EQ(stored().first, "hello world" + rest);
}

// A running job's record shows its output so far: the first bytes of both
// streams in stream order, cut at the bound (with `more`), and at the page
// limit for a stream of many tiny entries.
TEST_F(OutputFollowerTest, OutputSoFarIsTheStreamsHeadBounded) {
  using common::protocol::Stream;
  Put("r1", JobStatus::kRunning);
  auto none = jobs_->ReadOutputSoFar("r1", 1 << 20);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(none->stdout_data, "");
  EXPECT_FALSE(none->more);
  ASSERT_TRUE(jobs_
                  ->AppendOutput({JobOutput{"r1",
                                            {{"r1", Stream::kStdout, 0, 0, "hello "},
                                             {"r1", Stream::kStderr, 1, 0, "oops"},
                                             {"r1", Stream::kStdout, 2, 6, "world"}}}})
                  .ok());
  auto all = jobs_->ReadOutputSoFar("r1", 1 << 20);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->stdout_data, "hello world");
  EXPECT_EQ(all->stderr_data, "oops");
  EXPECT_FALSE(all->more);
  // Cut at 8 bytes: "hello " (6) then 2 of "oops"; "world" is left out.
  auto cut = jobs_->ReadOutputSoFar("r1", 8);
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(cut->stdout_data, "hello ");
  EXPECT_EQ(cut->stderr_data, "oo");
  EXPECT_TRUE(cut->more);
  auto exact = jobs_->ReadOutputSoFar("r1", 15);
  ASSERT_TRUE(exact.ok());
  EXPECT_EQ(exact->stdout_data + exact->stderr_data, "hello worldoops");
  EXPECT_FALSE(exact->more);

  // Many one-byte entries: the page limit stops the read, and says so.
  Put("r2", JobStatus::kRunning);
  const size_t pages = JobStore::kMaxOutputPages;
  std::vector<common::protocol::OutputChunk> tiny;
  for (size_t i = 0; i < pages * 256 + 10; ++i) {
    tiny.push_back({"r2", Stream::kStdout, i, i, "x"});
  }
  ASSERT_TRUE(jobs_->AppendOutput({JobOutput{"r2", tiny}}).ok());
  auto paged = jobs_->ReadOutputSoFar("r2", 1 << 20);
  ASSERT_TRUE(paged.ok());
  EXPECT_EQ(paged->stdout_data, std::string(pages * 256, 'x'));
  EXPECT_TRUE(paged->more);
}

}  // namespace
}  // namespace kiln::broker
