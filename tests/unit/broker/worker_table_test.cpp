#include "broker/scheduler/worker_table.hpp"

#include <gtest/gtest.h>

namespace kiln::broker {
namespace {

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
  WorkerTable t(seconds(3));
  auto now = Clock::now();
  t.OnRegister("a", Reg("a", 2), now, 0);
  t.OnRegister("c", Reg("c", 8, {"javascript"}), now, 0);
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

TEST(WorkerTable, RefusingWorkerGetsNothingUntilItsNextHeartbeat) {
  WorkerTable t(seconds(3));
  auto now = Clock::now();
  t.OnRegister("a", Reg("a", 2), now, 0);
  t.OnRegister("b", Reg("b", 2), now, 0);
  t.MarkFull("a");
  EXPECT_EQ(Ids(t.Candidates(0)), std::vector<std::string>{"b"});
  common::protocol::Heartbeat hb;
  t.OnHeartbeat("a", hb, now, 0);
  EXPECT_EQ(Ids(t.Candidates(0)), (std::vector<std::string>{"a", "b"}));
}

TEST(WorkerTable, DrainingWorkersGetNoJobs) {
  WorkerTable t(seconds(3));
  auto now = Clock::now();
  t.OnRegister("a", Reg("a", 2), now, 0);
  common::protocol::Heartbeat hb;
  hb.draining = true;
  EXPECT_TRUE(t.OnHeartbeat("a", hb, now, 0));
  EXPECT_TRUE(t.Candidates(0).empty());
  hb.draining = false;
  EXPECT_TRUE(t.OnHeartbeat("a", hb, now, 0));
  EXPECT_EQ(t.Candidates(0).size(), 1u);
}

TEST(WorkerTable, SilentWorkersExpireWithTheirJobs) {
  WorkerTable t(seconds(3));
  auto now = Clock::now();
  t.OnRegister("a", Reg("a", 2), now, 0);
  t.OnRegister("b", Reg("b", 2), now, 0);
  t.Assign("a", "j1");
  t.OnHeartbeat("b", {}, now + seconds(2), 0);
  EXPECT_TRUE(t.Expire(now + seconds(2)).empty());
  auto dead = t.Expire(now + seconds(4));
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].first, "a");
  EXPECT_EQ(dead[0].second, std::vector<std::string>{"j1"});
  EXPECT_FALSE(t.Known("a"));
  EXPECT_TRUE(t.Known("b"));
  EXPECT_FALSE(t.OnHeartbeat("a", {}, now, 0));  // must register again
}

TEST(WorkerTable, ReRegistrationReturnsLostJobs) {
  WorkerTable t(seconds(3));
  auto now = Clock::now();
  t.OnRegister("a", Reg("a", 2), now, 0);
  t.Assign("a", "j1");
  auto lost = t.OnRegister("a", Reg("a", 2), now, 0);
  EXPECT_EQ(lost, std::vector<std::string>{"j1"});
  EXPECT_EQ(Ids(t.Candidates(0)), std::vector<std::string>{"a"});
  EXPECT_EQ(t.Remove("a"), std::vector<std::string>{});
}

}  // namespace
}  // namespace kiln::broker
