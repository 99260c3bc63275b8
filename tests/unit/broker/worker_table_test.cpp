#include "broker/scheduler/worker_table.hpp"

#include <gtest/gtest.h>

#include <map>

#include "broker/scheduler/output_buffer.hpp"
#include "broker/scheduler/renewal_gate.hpp"
#include "broker/scheduler/worker_links.hpp"
#include "broker/scheduler/worker_liveness.hpp"

namespace kiln::broker {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

common::protocol::Register Reg(const std::string& id, uint32_t slots,
                               std::vector<std::string> runtimes = {"python", "shell"}) {
  common::protocol::Register r;
  r.worker_id = id;
  r.slots = slots;
  r.runtimes = std::move(runtimes);
  return r;
}

std::vector<std::string> Ids(const std::vector<WorkerSlots>& c) {
  std::vector<std::string> out;
  for (const auto& w : c) out.push_back(w.id);
  return out;
}

TEST(WorkerTable, CandidatesCarrySlotsAndRuntimes) {
  WorkerTable t;
  t.OnRegister("a", Reg("a", 2), 0);
  t.OnRegister("c", Reg("c", 8, {"javascript"}), 0);
  auto c = t.Candidates(0);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].id, "a");
  EXPECT_EQ(c[0].slots, 2u);
  EXPECT_EQ(c[0].runtimes, ",python,shell,");
  EXPECT_EQ(c[1].runtimes, ",javascript,");
  // A configured per-worker cap lowers big workers only.
  c = t.Candidates(4);
  EXPECT_EQ(c[0].slots, 2u);
  EXPECT_EQ(c[1].slots, 4u);
}

TEST(WorkerTable, CandidatesOfAnotherIsolationLevelOfferPlacementTokens) {
  WorkerTable t;
  auto g = Reg("g", 2);
  g.isolation = "gvisor";
  auto s = Reg("s", 2);
  s.isolation = "standard";  // the same as a worker that sends no level
  t.OnRegister("g", g, 0);
  t.OnRegister("o", Reg("o", 2, {"python"}), 0);
  t.OnRegister("s", s, 0);
  auto c = t.Candidates(0);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].runtimes, ",python@gvisor,shell@gvisor,");
  EXPECT_EQ(c[1].runtimes, ",python,");
  EXPECT_EQ(c[2].runtimes, ",python,shell,");
}

TEST(WorkerTable, RefusingWorkerGetsNothingUntilItsNextHeartbeat) {
  WorkerTable t;
  t.OnRegister("a", Reg("a", 2), 0);
  t.OnRegister("b", Reg("b", 2), 0);
  t.MarkFull("a");
  EXPECT_EQ(Ids(t.Candidates(0)), std::vector<std::string>{"b"});
  common::protocol::Heartbeat hb;
  t.OnHeartbeat("a", hb, 0);
  EXPECT_EQ(Ids(t.Candidates(0)), (std::vector<std::string>{"a", "b"}));
}

TEST(WorkerTable, DrainingWorkersGetNoJobs) {
  WorkerTable t;
  t.OnRegister("a", Reg("a", 2), 0);
  common::protocol::Heartbeat hb;
  hb.draining = true;
  EXPECT_TRUE(t.OnHeartbeat("a", hb, 0));
  EXPECT_TRUE(t.Candidates(0).empty());
  hb.draining = false;
  EXPECT_TRUE(t.OnHeartbeat("a", hb, 0));
  EXPECT_EQ(t.Candidates(0).size(), 1u);
  EXPECT_FALSE(t.OnHeartbeat("z", hb, 0));  // unknown: must register
}

TEST(WorkerTable, RemovedWorkersReturnTheirJobs) {
  WorkerTable t;
  t.OnRegister("a", Reg("a", 2), 0);
  t.Assign("a", "j1", 0);
  EXPECT_EQ(t.Remove("a"), std::vector<std::string>{"j1"});
  EXPECT_FALSE(t.Known("a"));
  EXPECT_TRUE(t.Remove("a").empty());
}

TEST(WorkerTable, RestartedWorkerLosesEveryJob) {
  WorkerTable t;
  auto r = Reg("a", 2);
  r.incarnation = "one";
  t.OnRegister("a", r, 0);
  t.Assign("a", "j1", 0);
  r.incarnation = "two";
  r.held_jobs = {"j1"};  // a new process cannot hold the old one's jobs
  auto out = t.OnRegister("a", r, 0);
  EXPECT_TRUE(out.restarted);
  EXPECT_EQ(out.lost, std::vector<std::string>{"j1"});
  EXPECT_EQ(Ids(t.Candidates(0)), std::vector<std::string>{"a"});
  EXPECT_EQ(t.Remove("a"), std::vector<std::string>{});
}

TEST(WorkerTable, ReconnectedWorkerKeepsTheJobsItHolds) {
  WorkerTable t;
  auto r = Reg("a", 2);
  r.incarnation = "one";
  t.OnRegister("a", r, 0);
  t.Assign("a", "j1", 0);
  t.Assign("a", "j2", 0);
  r.held_jobs = {"j2", "j9"};
  auto out = t.OnRegister("a", r, kRegisterCrossingMs);
  EXPECT_FALSE(out.restarted);
  EXPECT_EQ(out.lost, std::vector<std::string>{"j1"});
  EXPECT_EQ(t.Remove("a"), std::vector<std::string>{"j2"});
  // Without an incarnation a worker cannot prove it is the same process.
  t.OnRegister("b", Reg("b", 1), 0);
  t.Assign("b", "j3", 0);
  auto anon = Reg("b", 1);
  anon.held_jobs = {"j3"};
  out = t.OnRegister("b", anon, 0);
  EXPECT_TRUE(out.restarted);
  EXPECT_EQ(out.lost, std::vector<std::string>{"j3"});
}

TEST(WorkerTable, AJobSentJustBeforeARegisterIsNotLostYet) {
  // The worker built its register before the job's Execute reached it.
  WorkerTable t;
  auto r = Reg("a", 2);
  r.incarnation = "one";
  t.OnRegister("a", r, 0);
  t.Assign("a", "old", 1000);
  t.Assign("a", "new", 5000);
  auto out = t.OnRegister("a", r, 5000 + kRegisterCrossingMs - 1);
  EXPECT_FALSE(out.restarted);
  EXPECT_EQ(out.lost, std::vector<std::string>{"old"});
  // Past the crossing time it is gone; a new process never holds it.
  out = t.OnRegister("a", r, 5000 + kRegisterCrossingMs);
  EXPECT_EQ(out.lost, std::vector<std::string>{"new"});
  t.Assign("a", "newer", 9000);
  r.incarnation = "two";
  out = t.OnRegister("a", r, 9001);
  EXPECT_TRUE(out.restarted);
  EXPECT_EQ(out.lost, std::vector<std::string>{"newer"});
}

TEST(WorkerTable, SessionExecutionsChosenBeforeANewIncarnationDoNotGoToIt) {
  WorkerTable t;
  auto r = Reg("a", 2);
  r.incarnation = "one";
  EXPECT_TRUE(t.OnRegister("a", r, 0).fresh);
  // Until the broker says the old sessions are settled, none goes to it.
  EXPECT_FALSE(t.SessionsFrom("a", 5000));
  t.SetSessionsFrom("a", 1000);
  EXPECT_FALSE(t.SessionsFrom("a", 999));
  EXPECT_TRUE(t.SessionsFrom("a", 1000));
  // A reconnect of the same process keeps its sessions.
  EXPECT_FALSE(t.OnRegister("a", r, 2000).fresh);
  EXPECT_TRUE(t.SessionsFrom("a", 1500));
  // A restart does not.
  r.incarnation = "two";
  auto out = t.OnRegister("a", r, 3000);
  EXPECT_TRUE(out.fresh);
  EXPECT_FALSE(t.SessionsFrom("a", 2500));
  EXPECT_FALSE(t.SessionsFrom("z", 2500));  // unknown
}

TEST(RenewalGate, ClaimsWaitForAWindowOfAnswersAfterAStall) {
  RenewalGate gate(3000);
  EXPECT_FALSE(gate.MayClaim(0));  // no renewal yet
  for (int64_t t = 1000; t <= 4000; t += 1000) gate.Answered(t);
  EXPECT_TRUE(gate.MayClaim(4000));  // answered since 1000, without a gap
  // Redis stalls 5 s: nobody renewed, so nobody is dead yet.
  gate.Answered(9000);
  EXPECT_FALSE(gate.MayClaim(9000));
  gate.Answered(10000);
  gate.Answered(11000);
  EXPECT_FALSE(gate.MayClaim(11999));
  gate.Answered(12000);
  EXPECT_TRUE(gate.MayClaim(12000));  // every live broker had a window to renew
  // A gap just below the window is not a stall.
  gate.Answered(14999);
  EXPECT_TRUE(gate.MayClaim(14999));
}

TEST(WorkerLiveness, SilentWorkersExpire) {
  WorkerLiveness live(seconds(1), 3);
  auto now = WorkerLiveness::Clock::now();
  live.Turn(now);
  live.Register("a", now);
  live.Register("b", now);
  EXPECT_FALSE(live.Heard("z", now));  // unknown: must register
  for (int i = 1; i <= 40; ++i) {      // the loop turns every 100 ms
    auto t = now + milliseconds(100 * i);
    live.Turn(t);
    live.Heard("b", t);
    if (i == 20) {
      EXPECT_TRUE(live.Expire(t).empty());
    }
  }
  auto t = now + milliseconds(4000);
  EXPECT_EQ(live.Late(t), 1u);
  EXPECT_EQ(live.Expire(t), std::vector<std::string>{"a"});
  EXPECT_FALSE(live.Known("a"));
  EXPECT_TRUE(live.Known("b"));
}

TEST(WorkerLiveness, TheBrokersOwnPauseIsNotCountedAgainstWorkers) {
  WorkerLiveness live(seconds(1), 3);
  auto now = WorkerLiveness::Clock::now();
  live.Turn(now);
  live.Register("a", now);
  // The broker is stopped for 5 s: its next turn comes late.
  auto later = now + seconds(5);
  EXPECT_TRUE(live.Turn(later));
  EXPECT_TRUE(live.Expire(later).empty());
  EXPECT_TRUE(live.Expire(later + milliseconds(2900)).empty());
  // Silence after the broker is back counts again.
  for (int i = 1; i <= 35; ++i) EXPECT_FALSE(live.Turn(later + milliseconds(100 * i)));
  EXPECT_EQ(live.Expire(later + milliseconds(3500)), std::vector<std::string>{"a"});
}

common::protocol::OutputChunk Chunk(
    const std::string& job, uint64_t seq, uint64_t offset, const std::string& data,
    common::protocol::Stream s = common::protocol::Stream::kStdout) {
  return common::protocol::OutputChunk{job, s, seq, offset, data};
}

TEST(OutputBuffer, CoalescesContiguousChunksOfAStream) {
  OutputBuffer b(1 << 20, 4 << 20);
  uint64_t off = 0;
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(b.Add("w1", Chunk("j", static_cast<uint64_t>(i), off, "x")));
    off += 1;
  }
  ASSERT_TRUE(b.Add("w1", Chunk("j", 1000, 0, "e", common::protocol::Stream::kStderr)));
  ASSERT_TRUE(b.Add("w1", Chunk("j", 1001, 1000, "yy")));
  EXPECT_EQ(b.bytes(), 1003u);
  auto out = b.Take({"j"});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].chunks.size(), 3u);
  EXPECT_EQ(out[0].chunks[0].data, std::string(1000, 'x'));
  EXPECT_EQ(out[0].chunks[0].seq, 0u);
  EXPECT_EQ(out[0].chunks[1].stream, common::protocol::Stream::kStderr);
  EXPECT_EQ(out[0].chunks[2].data, "yy");
  EXPECT_EQ(out[0].chunks[2].offset, 1000u);
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(b.bytes(), 0u);
}

TEST(OutputBuffer, MergedEntriesStayWithinAChunk) {
  OutputBuffer b(4 << 20, 16 << 20);
  const std::string piece(40 << 10, 'a');
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(b.Add("w1", Chunk("j", i, i * piece.size(), piece)));
  auto out = b.Take({"j"});
  ASSERT_EQ(out.size(), 1u);
  for (const auto& c : out[0].chunks) EXPECT_LE(c.data.size(), common::protocol::kMaxChunkBytes);
  EXPECT_EQ(out[0].chunks.size(), 4u);  // 40 KiB + 40 KiB would pass 64 KiB
}

TEST(OutputBuffer, BoundsPerJobAndInAll) {
  OutputBuffer b(100, 150);
  EXPECT_TRUE(b.Add("w1", Chunk("flood", 0, 0, std::string(100, 'f'))));
  EXPECT_FALSE(b.Add("w1", Chunk("flood", 1, 100, "f")));  // its own bound
  EXPECT_TRUE(b.Add("w1", Chunk("other", 0, 0, std::string(50, 'o'))));
  EXPECT_FALSE(b.Add("w1", Chunk("third", 0, 0, "t")));  // the total bound
  EXPECT_EQ(b.dropped(), 2u);
  // Oldest job first, whole jobs, until the budget is spent.
  auto some = b.TakeSome(10);
  ASSERT_EQ(some.size(), 1u);
  EXPECT_EQ(some[0].job_id, "flood");
  some = b.TakeSome(1000);
  ASSERT_EQ(some.size(), 1u);
  EXPECT_EQ(some[0].job_id, "other");
  EXPECT_TRUE(b.empty());
  EXPECT_TRUE(b.Add("w1", Chunk("third", 0, 0, "t")));
}

TEST(OutputBuffer, ChunksOfOneJobFromTwoWorkersStayApart) {
  // A worker that sends chunks for a job another worker runs must neither
  // merge into nor crowd out the real ones: Redis refuses them by sender.
  OutputBuffer b(10, 1000);
  EXPECT_TRUE(b.Add("rogue", Chunk("j", 0, 0, std::string(10, 'r'))));
  EXPECT_TRUE(b.Add("w1", Chunk("j", 0, 0, "real")));
  EXPECT_TRUE(b.Add("w1", Chunk("j", 1, 4, "!")));
  auto out = b.Take({"j"});
  ASSERT_EQ(out.size(), 2u);
  std::map<std::string, std::string> by_worker;
  for (const auto& o : out) {
    EXPECT_EQ(o.job_id, "j");
    for (const auto& c : o.chunks) by_worker[o.worker] += c.data;
  }
  EXPECT_EQ(by_worker["w1"], "real!");
  EXPECT_EQ(by_worker["rogue"], std::string(10, 'r'));
  EXPECT_TRUE(b.empty());
  EXPECT_TRUE(b.TakeSome(1 << 20).empty());
}

TEST(WorkerLinks, AWorkerIsKnownByTheConnectionItRegisteredOn) {
  WorkerLinks links;
  EXPECT_FALSE(links.Bind("c1", "w1", "key1", 1).has_value());
  ASSERT_NE(links.Of("c1"), nullptr);
  EXPECT_EQ(links.Of("c1")->worker, "w1");
  EXPECT_EQ(links.Of("c1")->key, "key1");
  EXPECT_EQ(links.RoutingOf("w1"), "c1");
  EXPECT_EQ(links.Of("c2"), nullptr);
  // It reconnects and registers from c2: c1 speaks for no one any more.
  EXPECT_EQ(links.Bind("c2", "w1", "key1", 1), "c1");
  EXPECT_EQ(links.Of("c1"), nullptr);
  EXPECT_EQ(links.RoutingOf("w1"), "c2");
  EXPECT_EQ(links.size(), 1u);
  // A second worker on its own connection; removal forgets both sides.
  links.Bind("c3", "w2", "key2", 2);
  EXPECT_EQ(links.Routings(), (std::vector<std::string>{"c2", "c3"}));
  links.Remove("w1");
  EXPECT_EQ(links.Of("c2"), nullptr);
  EXPECT_FALSE(links.RoutingOf("w1").has_value());
  EXPECT_EQ(links.RoutingOf("w2"), "c3");
}

}  // namespace
}  // namespace kiln::broker
