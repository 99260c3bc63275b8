// Outbox without sockets: Results before output chunks, chunks round-robin
// across jobs, the per-job and total bounds on unsent chunks, a Result
// dropping its job's unsent chunks, Results kept until acknowledged and sent
// again after a registration or a timeout, and the bounds on kept Results.
#include "worker/link/outbox.hpp"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace kiln::worker {
namespace {

namespace protocol = common::protocol;
using namespace std::chrono_literals;
using Clock = Outbox::Clock;

// Brokers by name; each takes `room` messages (unlimited when absent).
class FakeLinks : public Outbox::Links {
 public:
  bool Registered(const std::string& broker) const override { return registered.count(broker); }
  std::vector<std::string> RegisteredBrokers() const override {
    return {registered.begin(), registered.end()};
  }
  bool Send(const std::string& broker, const protocol::Message& m) override {
    auto r = room.find(broker);
    if (r != room.end()) {
      if (r->second == 0) return false;
      --r->second;
    }
    sent.emplace_back(broker, m);
    return true;
  }

  // What was sent, as "broker:result:job" / "broker:chunk:job:seq", then cleared.
  std::vector<std::string> Take() {
    std::vector<std::string> out;
    for (const auto& [broker, m] : sent) {
      if (auto* r = std::get_if<protocol::Result>(&m)) {
        out.push_back(broker + ":result:" + r->job_id);
      } else if (auto* c = std::get_if<protocol::OutputChunk>(&m)) {
        out.push_back(broker + ":chunk:" + c->job_id + ":" + std::to_string(c->seq));
      }
    }
    sent.clear();
    return out;
  }

  std::set<std::string> registered;
  std::map<std::string, size_t> room;
  std::vector<std::pair<std::string, protocol::Message>> sent;
};

protocol::OutputChunk Chunk(const std::string& job, uint64_t seq, size_t bytes = 100) {
  return protocol::OutputChunk{job, protocol::Stream::kStdout, seq, seq * bytes,
                               std::string(bytes, 'x')};
}

protocol::Result Result(const std::string& job, size_t stdout_bytes = 10) {
  protocol::Result r;
  r.job_id = job;
  r.stdout_data = std::string(stdout_bytes, 'o');
  return r;
}

Outbox::Limits SmallLimits() {
  Outbox::Limits l;
  l.job_chunk_bytes = 1000;
  l.total_chunk_bytes = 2500;
  l.results = 4;
  l.result_bytes = 1u << 20;
  l.resend_after = 100ms;
  return l;
}

class OutboxTest : public ::testing::Test {
 protected:
  OutboxTest() : outbox_(SmallLimits()) { links_.registered = {"A", "B"}; }

  std::vector<std::string> Pump(Clock::time_point at) {
    outbox_.Pump(links_, at);
    return links_.Take();
  }
  std::vector<std::string> Pump() { return Pump(t0_); }

  Outbox outbox_;
  FakeLinks links_;
  const Clock::time_point t0_ = Clock::now();
};

using V = std::vector<std::string>;

TEST_F(OutboxTest, ResultsGoBeforeChunksAndChunksRoundRobin) {
  for (uint64_t i = 0; i < 3; ++i) outbox_.PostChunk("A", Chunk("flood", i));
  for (uint64_t i = 0; i < 2; ++i) outbox_.PostChunk("A", Chunk("quiet", i));
  outbox_.PostResult("A", Result("r1"));
  outbox_.PostResult("B", Result("r2"));
  EXPECT_EQ(Pump(), (V{"A:result:r1", "B:result:r2", "A:chunk:flood:0", "A:chunk:quiet:0",
                       "A:chunk:flood:1", "A:chunk:quiet:1", "A:chunk:flood:2"}));
  EXPECT_EQ(outbox_.unsent_chunk_bytes(), 0u);
  EXPECT_EQ(outbox_.stats().chunks_sent, 5u);
  EXPECT_EQ(outbox_.stats().chunk_bytes_sent, 500u);
}

// A link that takes one message at a time: a Result posted after chunks
// still goes first at the next turn.
TEST_F(OutboxTest, AFullLinkKeepsResultsAheadOfChunks) {
  links_.room["A"] = 2;
  for (uint64_t i = 0; i < 3; ++i) outbox_.PostChunk("A", Chunk("flood", i));
  EXPECT_EQ(Pump(), (V{"A:chunk:flood:0", "A:chunk:flood:1"}));
  outbox_.PostResult("A", Result("r1"));
  EXPECT_EQ(Pump(), V{}) << "A takes nothing more";
  links_.room["A"] = 1;
  EXPECT_EQ(Pump(), (V{"A:result:r1"}));
  links_.room.erase("A");
  EXPECT_EQ(Pump(), (V{"A:chunk:flood:2"}));
}

TEST_F(OutboxTest, ChunksGoOnlyToTheirRegisteredBroker) {
  outbox_.PostChunk("C", Chunk("j", 0));
  EXPECT_EQ(Pump(), V{}) << "C is not registered: its chunks wait";
  EXPECT_TRUE(outbox_.has_chunks());
  links_.registered.insert("C");
  EXPECT_EQ(Pump(), (V{"C:chunk:j:0"}));
}

TEST_F(OutboxTest, PerJobBoundDropsTheJobsLaterChunks) {
  links_.registered.clear();  // nothing leaves: everything stays unsent
  for (uint64_t i = 0; i < 10; ++i) outbox_.PostChunk("A", Chunk("flood", i, 300));
  EXPECT_EQ(outbox_.unsent_chunk_bytes(), 900u) << "3 x 300 fit in 1000";
  EXPECT_EQ(outbox_.stats().chunks_dropped, 7u);
  outbox_.PostChunk("A", Chunk("other", 0, 300));
  EXPECT_EQ(outbox_.unsent_chunk_bytes(), 1200u) << "another job is not affected";
  links_.registered = {"A"};
  EXPECT_EQ(Pump(),
            (V{"A:chunk:flood:0", "A:chunk:other:0", "A:chunk:flood:1", "A:chunk:flood:2"}));
  // Once a job dropped a chunk, its stream has a gap: later ones are dropped too.
  outbox_.PostChunk("A", Chunk("flood", 10, 10));
  EXPECT_EQ(Pump(), V{});
  EXPECT_EQ(outbox_.stats().chunks_dropped, 8u);
}

TEST_F(OutboxTest, TotalBoundDropsPastIt) {
  links_.registered.clear();
  for (const char* job : {"a", "b", "c"}) {
    for (uint64_t i = 0; i < 2; ++i) outbox_.PostChunk("A", Chunk(job, i, 500));
  }
  EXPECT_EQ(outbox_.unsent_chunk_bytes(), 2500u);
  outbox_.PostChunk("A", Chunk("d", 0, 10));
  EXPECT_EQ(outbox_.unsent_chunk_bytes(), 2500u);
  EXPECT_EQ(outbox_.stats().chunks_dropped, 2u) << "c's second chunk and d's first";
}

TEST_F(OutboxTest, AResultDropsItsJobsUnsentChunks) {
  links_.registered.clear();
  for (uint64_t i = 0; i < 3; ++i) outbox_.PostChunk("A", Chunk("j", i));
  outbox_.PostChunk("A", Chunk("other", 0));
  outbox_.PostResult("A", Result("j"));
  EXPECT_EQ(outbox_.unsent_chunk_bytes(), 100u);
  links_.registered = {"A"};
  EXPECT_EQ(Pump(), (V{"A:result:j", "A:chunk:other:0"}));
  EXPECT_FALSE(outbox_.has_chunks());
}

TEST_F(OutboxTest, ResultsAreKeptUntilAcknowledged) {
  outbox_.PostResult("A", Result("j1"));
  EXPECT_EQ(Pump(), (V{"A:result:j1"}));
  EXPECT_EQ(outbox_.unacked(), 1u);
  EXPECT_EQ(Pump(t0_ + 50ms), V{}) << "not yet due again";
  EXPECT_FALSE(outbox_.OnAck("unknown"));
  EXPECT_TRUE(outbox_.OnAck("j1"));
  EXPECT_EQ(outbox_.unacked(), 0u);
  EXPECT_EQ(outbox_.unacked_bytes(), 0u);
  EXPECT_FALSE(outbox_.NextResend().has_value());
  EXPECT_EQ(Pump(t0_ + 1h), V{}) << "acknowledged: never sent again";
}

TEST_F(OutboxTest, NoRegisteredBrokerKeepsResultsForTheFirstOne) {
  links_.registered.clear();
  outbox_.PostResult("A", Result("j1"));
  EXPECT_EQ(Pump(), V{});
  links_.registered = {"B"};
  EXPECT_EQ(Pump(), (V{"B:result:j1"})) << "any registered broker takes it";
}

TEST_F(OutboxTest, UnacknowledgedResultsAreSentAgainAfterATimeout) {
  outbox_.PostResult("A", Result("j1"));
  EXPECT_EQ(Pump(t0_), (V{"A:result:j1"}));
  EXPECT_EQ(outbox_.NextResend(), t0_ + 100ms);
  EXPECT_EQ(Pump(t0_ + 99ms), V{});
  EXPECT_EQ(Pump(t0_ + 100ms), (V{"A:result:j1"}));
  // Doubling: next after 200 ms; its broker is gone by then, so any registered one.
  links_.registered = {"B"};
  EXPECT_EQ(Pump(t0_ + 299ms), V{});
  EXPECT_EQ(Pump(t0_ + 300ms), (V{"B:result:j1"}));
  EXPECT_EQ(Pump(t0_ + 699ms), V{});
  EXPECT_EQ(Pump(t0_ + 700ms), (V{"B:result:j1"}));
  EXPECT_EQ(outbox_.NextResend(), t0_ + 1500ms) << "at most 8 x resend_after";
  EXPECT_EQ(Pump(t0_ + 1500ms), (V{"B:result:j1"}));
  EXPECT_EQ(outbox_.NextResend(), t0_ + 2300ms);
  EXPECT_EQ(outbox_.stats().results_resent, 4u);
}

TEST_F(OutboxTest, ARegistrationResendsItsOwnAndOrphanedResults) {
  links_.registered = {"A", "B", "C"};
  outbox_.PostResult("A", Result("a1"));
  outbox_.PostResult("B", Result("b1"));
  outbox_.PostResult("C", Result("c1"));
  outbox_.PostResult("A", Result("a2"));
  EXPECT_EQ(Pump(), (V{"A:result:a1", "B:result:b1", "C:result:c1", "A:result:a2"}));
  EXPECT_TRUE(outbox_.OnAck("a2"));
  // C went away; A registered again (it restarted, or its connection broke).
  links_.registered = {"A", "B"};
  outbox_.OnRegistered("A", links_, Outbox::Resend::kOwnAndOrphaned);
  EXPECT_EQ(Pump(t0_ + 1ms), (V{"A:result:a1", "A:result:c1"}))
      << "A's own and the orphan, not B's (B is there) nor the acknowledged one";
  // The timer starts again from the resend (and doubles, as after any resend).
  EXPECT_EQ(Pump(t0_ + 100ms), (V{"B:result:b1"}));
  EXPECT_EQ(Pump(t0_ + 200ms), V{});
  EXPECT_EQ(Pump(t0_ + 201ms), (V{"A:result:a1", "A:result:c1"}));
}

TEST_F(OutboxTest, BoundsDropTheOldestResults) {
  for (int i = 0; i < 6; ++i) outbox_.PostResult("A", Result("j" + std::to_string(i)));
  EXPECT_EQ(outbox_.unacked(), 4u);
  EXPECT_EQ(outbox_.stats().results_dropped, 2u);
  EXPECT_EQ(outbox_.UnackedJobs("A", 100), (V{"j2", "j3", "j4", "j5"}));
  EXPECT_EQ(Pump(), (V{"A:result:j2", "A:result:j3", "A:result:j4", "A:result:j5"}));

  Outbox::Limits l = SmallLimits();
  l.result_bytes = 3 * ApproxResultBytes(Result("x", 1000)) + 10;
  Outbox by_bytes(l);
  for (int i = 0; i < 4; ++i) by_bytes.PostResult("A", Result("k" + std::to_string(i), 1000));
  EXPECT_EQ(by_bytes.UnackedJobs("A", 100), (V{"k1", "k2", "k3"}));
  EXPECT_LE(by_bytes.unacked_bytes(), l.result_bytes);
  EXPECT_EQ(by_bytes.stats().results_dropped, 1u);
}

TEST_F(OutboxTest, UnackedJobsListsTheBrokersOwnFirst) {
  outbox_.PostResult("B", Result("b1"));
  outbox_.PostResult("A", Result("a1"));
  outbox_.PostResult("B", Result("b2"));
  outbox_.PostResult("A", Result("a2"));
  EXPECT_EQ(outbox_.UnackedJobs("A", 100), (V{"a1", "a2", "b1", "b2"}));
  EXPECT_EQ(outbox_.UnackedJobs("B", 3), (V{"b1", "b2", "a1"}));
}

TEST_F(OutboxTest, ANewResultForTheSameJobReplacesTheKeptOne) {
  outbox_.PostResult("A", Result("j", 10));
  outbox_.PostResult("B", Result("j", 20));
  EXPECT_EQ(outbox_.unacked(), 1u);
  EXPECT_EQ(Pump(), (V{"B:result:j"}));
  EXPECT_TRUE(outbox_.OnAck("j"));
  EXPECT_EQ(outbox_.unacked_bytes(), 0u);
}

// A broker that speaks again after silence got what it was sent (its queue
// was kept): only Results whose broker is away go to it.
TEST_F(OutboxTest, ABrokerBackFromSilenceGetsOnlyOrphanedResults) {
  links_.registered = {"A", "C"};
  outbox_.PostResult("A", Result("a1"));
  outbox_.PostResult("C", Result("c1"));
  EXPECT_EQ(Pump(), (V{"A:result:a1", "C:result:c1"}));
  links_.registered = {"A"};
  outbox_.OnRegistered("A", links_, Outbox::Resend::kOrphaned);
  EXPECT_EQ(Pump(t0_ + 1ms), (V{"A:result:c1"}));
}

}  // namespace
}  // namespace kiln::worker
