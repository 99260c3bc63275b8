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

TEST(WorkerTable, PicksLeastLoadedWorkerOfferingTheRuntime) {
  WorkerTable t(seconds(3));
  auto now = Clock::now();
  t.OnRegister("a", Reg("a", 2), now, 0);
  t.OnRegister("b", Reg("b", 4), now, 0);
  t.OnRegister("c", Reg("c", 8, {"javascript"}), now, 0);
  EXPECT_EQ(t.Pick("javascript"), "c");
  t.Assign("a", "j1");               // a: 1/2
  EXPECT_EQ(t.Pick("python"), "b");  // b: 0/4
  t.Assign("b", "j2");
  t.Assign("b", "j3");  // b: 2/4 == a's 1/2: fewer running wins
  EXPECT_EQ(t.Pick("python"), "a");
  t.Assign("a", "j4");  // a full
  t.Assign("b", "j5");
  t.Assign("b", "j6");  // b full
  EXPECT_EQ(t.Pick("python"), std::nullopt);
  t.Release("a", "j1");
  EXPECT_EQ(t.Pick("python"), "a");
  EXPECT_EQ(t.Pick("ruby"), std::nullopt);
}

TEST(WorkerTable, OtherBrokersJobsCountAgainstSlots) {
  WorkerTable t(seconds(3));
  auto now = Clock::now();
  t.OnRegister("a", Reg("a", 2), now, 0);
  t.OnRegister("b", Reg("b", 2), now, 0);
  common::protocol::Heartbeat hb;
  hb.running = 2;  // both of a's slots hold another broker's jobs
  t.OnHeartbeat("a", hb, now, 0);
  EXPECT_EQ(t.Pick("python"), "b");
  t.Assign("b", "j1");
  t.Assign("b", "j2");
  EXPECT_EQ(t.Pick("python"), std::nullopt);
  hb.running = 1;
  t.OnHeartbeat("a", hb, now, 0);
  EXPECT_EQ(t.Pick("python"), "a");
  // A refusal marks the worker full until its next heartbeat.
  t.MarkFull("a");
  EXPECT_EQ(t.Pick("python"), std::nullopt);
  hb.running = 0;
  t.OnHeartbeat("a", hb, now, 0);
  EXPECT_EQ(t.Pick("python"), "a");
}

TEST(WorkerTable, DrainingWorkersGetNoJobs) {
  WorkerTable t(seconds(3));
  auto now = Clock::now();
  t.OnRegister("a", Reg("a", 2), now, 0);
  common::protocol::Heartbeat hb;
  hb.draining = true;
  EXPECT_TRUE(t.OnHeartbeat("a", hb, now, 0));
  EXPECT_EQ(t.Pick("python"), std::nullopt);
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
  EXPECT_EQ(t.Pick("python"), "a");
  EXPECT_EQ(t.Remove("a"), std::vector<std::string>{});
}

}  // namespace
}  // namespace kiln::broker
