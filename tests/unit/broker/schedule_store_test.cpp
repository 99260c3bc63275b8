// The scheduling scripts (ScheduleStore, SessionStore, JobStore::Load)
// against a real redis-server: slot leases, fair queues, priorities,
// idempotency, sessions, broker takeover. No broker process, no sockets of
// ours: each test calls the store the way the broker does.
#include "broker/store/schedule_store.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <thread>

#include "broker/scheduler/worker_table.hpp"
#include "broker/store/job_store.hpp"
#include "broker/store/session_store.hpp"
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

class ScheduleStoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = MakeTempDir("kiln-sched");
    port_ = FreePort();
    redis_ = new ChildProcess(
        ChildProcess::Start({"/usr/bin/redis-server", "--port", std::to_string(port_), "--bind",
                             "127.0.0.1", "--dir", dir_, "--save", "", "--appendonly", "no"},
                            dir_ + "/redis.log"));
    ASSERT_TRUE(WaitFor([] { return CanConnect(port_); }, std::chrono::seconds(10)));
  }
  static void TearDownTestSuite() {
    delete redis_;
    RemoveTree(dir_);
  }

  void SetUp() override {
    auto pool = RedisPool::Create("redis://127.0.0.1:" + std::to_string(port_), 4);
    ASSERT_TRUE(pool.ok());
    pool_ = std::move(*pool);
    auto c = pool_->Acquire();
    ASSERT_TRUE(c->Command({"FLUSHALL"}).ok());
    settings_.broker_id = "b1";
    settings_.lease_ms = 60000;
    settings_.session_ttl_ms = 60000;
    jobs_ = std::make_unique<JobStore>(pool_.get(), 3600);
    sessions_ = std::make_unique<SessionStore>(pool_.get(), 60000);
    Reset();
  }

  void Reset() { sched_ = std::make_unique<ScheduleStore>(pool_.get(), settings_); }

  static WorkerSlots Worker(const std::string& id, uint32_t slots,
                            const std::string& runtimes = ",python,shell,") {
    return {id, slots, runtimes};
  }

  // A candidate as the broker builds it from a worker's registration.
  static WorkerSlots Registered(const std::string& id, uint32_t slots,
                                const std::string& isolation) {
    common::protocol::Register reg;
    reg.worker_id = id;
    reg.slots = slots;
    reg.runtimes = {"python", "shell"};
    reg.isolation = isolation;
    WorkerTable table;
    table.OnRegister(id, reg, 0);
    return table.Candidates(0).at(0);
  }

  JobSpec Spec(const std::string& tenant, const std::string& session = "",
               const std::string& language = "python", uint32_t priority = 0) {
    JobSpec s;
    s.id = "ex_" + std::to_string(++counter_);
    s.tenant = tenant;
    s.language = language;
    s.code = "print(1)";
    s.session_id = session;
    s.priority = priority;
    s.limits = {1000, 64, 1000, 1000, 8};
    s.created_ms = common::NowMs();
    return s;
  }

  SubmitOutcome Submit(const JobSpec& spec, const std::vector<WorkerSlots>& workers,
                       const std::string& idem = "", TenantQuota quota = {}) {
    auto out = sched_->Submit(spec, idem, quota, workers, common::NowMs());
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    return out.ok() ? *out : SubmitOutcome{};
  }

  common::Status SubmitError(const JobSpec& spec, const std::vector<WorkerSlots>& workers,
                             TenantQuota quota = {}) {
    auto out = sched_->Submit(spec, "", quota, workers, common::NowMs());
    return out.ok() ? common::Status::Ok() : out.status();
  }

  FinishOutcome End(const std::string& id, const std::vector<WorkerSlots>& workers,
                    FinishExpect expect = FinishExpect::kAny,
                    JobStatus status = JobStatus::kSucceeded) {
    auto rec = jobs_->Load(id);
    EXPECT_TRUE(rec.ok()) << rec.status().ToString();
    JobRecord r = rec.ok() ? *rec : JobRecord{};
    r.id = id;
    r.status = status;
    auto out = sched_->Finish(r, expect, workers, common::NowMs());
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    return out.ok() ? *out : FinishOutcome{};
  }

  long long Zcard(const std::string& key) {
    auto c = pool_->Acquire();
    auto r = c->Command({"ZCARD", key});
    return r.ok() ? r->integer : -1;
  }

  static int port_;
  static std::string dir_;
  static ChildProcess* redis_;
  std::unique_ptr<RedisPool> pool_;
  ScheduleSettings settings_;
  std::unique_ptr<ScheduleStore> sched_;
  std::unique_ptr<JobStore> jobs_;
  std::unique_ptr<SessionStore> sessions_;
  int counter_ = 0;
};

int ScheduleStoreTest::port_ = 0;
std::string ScheduleStoreTest::dir_;
ChildProcess* ScheduleStoreTest::redis_ = nullptr;

TEST_F(ScheduleStoreTest, StartsOnTheLeastLoadedWorkerOfferingTheRuntime) {
  std::vector<WorkerSlots> w = {Worker("a", 2), Worker("b", 4), Worker("c", 8, ",javascript,")};
  EXPECT_EQ(Submit(Spec("t", "", "javascript"), w).worker, "c");
  auto first = Submit(Spec("t"), w);  // a and b idle: tie on load, fewest busy
  ASSERT_EQ(first.kind, SubmitOutcome::Kind::kStarted);
  auto second = Submit(Spec("t"), w);
  // One of them holds a job now; the other is less loaded.
  EXPECT_NE(second.worker, first.worker);
  auto third = Submit(Spec("t"), w);  // a 1/2, b 1/4 -> b
  EXPECT_EQ(third.worker, "b");
  auto rec = jobs_->Load("ex_2");
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->status, JobStatus::kRunning);
  EXPECT_EQ(rec->worker, first.worker);
  EXPECT_GT(rec->started_ms, 0);
  EXPECT_EQ(Zcard("{kiln}:lease:global"), 4);
  EXPECT_EQ(Zcard("{kiln}:lease:t:t"), 4);
}

// One source of truth: until a job ends its state is the hash's fields (the
// scripts move it); the record JSON is written once, when it ends.
TEST_F(ScheduleStoreTest, ALiveJobIsItsHashFieldsAndItsRecordIsWrittenOnceItEnds) {
  std::vector<WorkerSlots> w = {Registered("a", 1, "gvisor")};
  JobSpec running = Spec("t", "s1");
  running.isolation = "gvisor";
  running.warnings = {"uses subprocess", "reads /proc"};
  ASSERT_EQ(Submit(running, w).kind, SubmitOutcome::Kind::kStarted);
  JobSpec queued = Spec("t");
  queued.isolation = "gvisor";
  ASSERT_EQ(Submit(queued, w).kind, SubmitOutcome::Kind::kQueued);
  auto c = pool_->Acquire();
  for (const auto* spec : {&running, &queued}) {
    auto stored = c->Command({"HEXISTS", JobStore::JobKey(spec->id), "record"});
    ASSERT_TRUE(stored.ok());
    EXPECT_EQ(stored->integer, 0) << spec->id << ": a live job has no record JSON";
  }
  auto rec = jobs_->Load(running.id);
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  EXPECT_EQ(rec->status, JobStatus::kRunning);
  EXPECT_EQ(rec->tenant, "t");
  EXPECT_EQ(rec->language, "python");
  EXPECT_EQ(rec->isolation, "gvisor");
  EXPECT_EQ(rec->session_id, "s1");  // the tenant's id, not the cluster's key
  EXPECT_EQ(rec->created_ms, running.created_ms);
  EXPECT_EQ(rec->warnings, running.warnings);
  EXPECT_EQ(rec->worker, "a");
  EXPECT_EQ(rec->session_epoch, 1u);
  auto waiting = jobs_->Load(queued.id);
  ASSERT_TRUE(waiting.ok());
  EXPECT_EQ(waiting->status, JobStatus::kQueued);
  EXPECT_EQ(waiting->queue_position, 1);
  EXPECT_TRUE(waiting->warnings.empty());
  auto peek = jobs_->PeekRecord(queued.id);
  ASSERT_TRUE(peek.ok()) << peek.status().ToString();
  EXPECT_EQ(peek->record_bytes, 0u);

  End(running.id, w);  // starts the queued one on the freed slot
  auto ended = jobs_->Load(running.id);
  ASSERT_TRUE(ended.ok());
  EXPECT_EQ(ended->status, JobStatus::kSucceeded);
  auto text = jobs_->RecordText(running.id);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, ended->ToJson().dump());
  auto next = jobs_->Load(queued.id);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->status, JobStatus::kRunning);
}

TEST_F(ScheduleStoreTest, RuntimeNobodyOffersWaitsWithItsReason) {
  auto out = Submit(Spec("t", "", "javascript"), {Worker("a", 2)});
  EXPECT_EQ(out.kind, SubmitOutcome::Kind::kQueued);
  EXPECT_EQ(out.wait_reason, "runtime");
  auto rec = jobs_->Load("ex_1");
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->status, JobStatus::kQueued);
  EXPECT_EQ(rec->queue_position, 1u);
  EXPECT_EQ(rec->wait_reason, "runtime");
  // A worker offering it arrives: the pump starts it.
  auto started = sched_->Pump({Worker("j", 1, ",javascript,")}, common::NowMs());
  ASSERT_TRUE(started.ok());
  ASSERT_EQ(started->size(), 1u);
  EXPECT_EQ((*started)[0].job_id, "ex_1");
  EXPECT_EQ((*started)[0].worker, "j");
}

TEST_F(ScheduleStoreTest, JobsGoOnlyToWorkersOfTheirIsolationLevel) {
  const WorkerSlots standard = Registered("std", 2, "");
  const WorkerSlots gvisor = Registered("gv", 4, "gvisor");
  auto gvisor_spec = [&](const std::string& tenant, const std::string& session = "") {
    JobSpec s = Spec(tenant, session);
    s.isolation = "gvisor";
    return s;
  };
  // A gvisor job with only a standard worker live waits, as for a missing runtime.
  auto out = Submit(gvisor_spec("g"), {standard});  // ex_1
  EXPECT_EQ(out.kind, SubmitOutcome::Kind::kQueued);
  EXPECT_EQ(out.wait_reason, "runtime");
  auto rec = jobs_->Load("ex_1");
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  EXPECT_EQ(rec->status, JobStatus::kQueued);
  EXPECT_EQ(rec->wait_reason, "runtime");
  EXPECT_EQ(rec->language, "python");
  EXPECT_EQ(rec->isolation, "gvisor");
  auto started = sched_->Pump({standard}, common::NowMs());
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  EXPECT_TRUE(started->empty());
  // A gvisor worker arrives: it starts there.
  started = sched_->Pump({standard, gvisor}, common::NowMs());
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  ASSERT_EQ(started->size(), 1u);
  EXPECT_EQ((*started)[0].job_id, "ex_1");
  EXPECT_EQ((*started)[0].worker, "gv");

  // Standard jobs never land on the gvisor worker, however idle it is.
  out = Submit(Spec("s"), {gvisor});  // ex_2
  EXPECT_EQ(out.kind, SubmitOutcome::Kind::kQueued);
  EXPECT_EQ(out.wait_reason, "runtime");
  started = sched_->Pump({gvisor, standard}, common::NowMs());
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  ASSERT_EQ(started->size(), 1u);
  EXPECT_EQ((*started)[0].worker, "std");
  EXPECT_EQ(Submit(Spec("s"), {gvisor, standard}).worker, "std");  // ex_3: std is full now
  out = Submit(Spec("s"), {gvisor, standard});                     // ex_4
  EXPECT_EQ(out.kind, SubmitOutcome::Kind::kQueued);
  EXPECT_EQ(out.wait_reason, "worker");
  EXPECT_EQ(Zcard("{kiln}:lease:w:gv"), 1);

  // A gvisor session binds to a gvisor worker; it still runs plain python.
  out = Submit(gvisor_spec("g2", "s1"), {standard, gvisor});  // ex_5
  EXPECT_EQ(out.kind, SubmitOutcome::Kind::kStarted);
  EXPECT_EQ(out.worker, "gv");
  auto listed = sessions_->List("g2", "");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].language, "python");
  EXPECT_EQ(SubmitError(gvisor_spec("g2", "s1"), {standard, gvisor}).code(), common::Code::kOk);

  // An approved job is placed by its level too.
  TenantQuota hold;
  hold.needs_approval = true;
  hold.approval_deadline_ms = common::NowMs() + 60000;
  out = Submit(gvisor_spec("g3"), {standard, gvisor}, "", hold);  // ex_7
  EXPECT_EQ(out.kind, SubmitOutcome::Kind::kHeld);
  auto approved = sched_->Approve("ex_7", false, "admin:0", {standard}, common::NowMs());
  ASSERT_TRUE(approved.ok()) << approved.status().ToString();
  EXPECT_EQ(approved->kind, ApproveOutcome::Kind::kQueued);
  started = sched_->Pump({standard, gvisor}, common::NowMs());
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  ASSERT_EQ(started->size(), 1u);
  EXPECT_EQ((*started)[0].job_id, "ex_7");
  EXPECT_EQ((*started)[0].worker, "gv");

  // A job an older broker queued holds no placement token: its language places it.
  auto c = pool_->Acquire();
  ASSERT_TRUE(c->Command({"HDEL", "{kiln}:job:ex_4", "placement"}).ok());
  auto fin = End("ex_2", {standard, gvisor});
  ASSERT_EQ(fin.started.size(), 1u);
  EXPECT_EQ(fin.started[0].job_id, "ex_4");
  EXPECT_EQ(fin.started[0].worker, "std");
}

TEST_F(ScheduleStoreTest, GlobalLimitQueuesAndAFinishStartsTheNext) {
  settings_.global_slots = 2;
  Reset();
  std::vector<WorkerSlots> w = {Worker("a", 8)};
  EXPECT_EQ(Submit(Spec("t"), w).kind, SubmitOutcome::Kind::kStarted);
  EXPECT_EQ(Submit(Spec("t"), w).kind, SubmitOutcome::Kind::kStarted);
  auto third = Submit(Spec("t"), w);
  EXPECT_EQ(third.kind, SubmitOutcome::Kind::kQueued);
  EXPECT_EQ(third.wait_reason, "global");
  auto fourth = Submit(Spec("u"), w);  // another tenant waits as well
  EXPECT_EQ(fourth.kind, SubmitOutcome::Kind::kQueued);
  EXPECT_EQ(Zcard("{kiln}:audit:pending"), 0);
  auto fin = End("ex_1", w);
  EXPECT_EQ(fin.kind, FinishOutcome::Kind::kStored);
  ASSERT_EQ(fin.started.size(), 1u);  // exactly one slot freed
  EXPECT_EQ(Zcard("{kiln}:lease:global"), 2);
  // Stored with its end in the same step: the audit entry it is owed.
  EXPECT_EQ(Zcard("{kiln}:audit:pending"), 1);
  // The job's own end is announced once: a second end is refused.
  EXPECT_EQ(End("ex_1", w).kind, FinishOutcome::Kind::kEnded);
}

TEST_F(ScheduleStoreTest, TenantLimitHoldsOneTenantButNotAnother) {
  ASSERT_TRUE(sched_->PublishTenants({{"small", 1, 1}, {"big", 0, 1}}).ok());
  std::vector<WorkerSlots> w = {Worker("a", 8)};
  EXPECT_EQ(Submit(Spec("small"), w).kind, SubmitOutcome::Kind::kStarted);
  auto second = Submit(Spec("small"), w);
  EXPECT_EQ(second.kind, SubmitOutcome::Kind::kQueued);
  EXPECT_EQ(second.wait_reason, "tenant");
  EXPECT_EQ(Submit(Spec("big"), w).kind, SubmitOutcome::Kind::kStarted);
  EXPECT_EQ(Submit(Spec("big"), w).kind, SubmitOutcome::Kind::kStarted);
  // The big tenant's end does not start the small tenant's job...
  EXPECT_TRUE(End("ex_3", w).started.empty());
  // ...the small tenant's own end does.
  auto fin = End("ex_1", w);
  ASSERT_EQ(fin.started.size(), 1u);
  EXPECT_EQ(fin.started[0].job_id, "ex_2");
}

TEST_F(ScheduleStoreTest, WorkerSlotsAreALimit) {
  std::vector<WorkerSlots> w = {Worker("a", 1)};
  EXPECT_EQ(Submit(Spec("t"), w).kind, SubmitOutcome::Kind::kStarted);
  auto second = Submit(Spec("t"), w);
  EXPECT_EQ(second.kind, SubmitOutcome::Kind::kQueued);
  EXPECT_EQ(second.wait_reason, "worker");
  EXPECT_EQ(Zcard("{kiln}:lease:w:a"), 1);
}

// A finish that frees one slot starts one queued job and then stops: it
// does not walk the rest of the queue (each entry's job and session read,
// every lease set recounted) once no slot is left. Counted with Redis's own
// command counter, which includes the commands scripts run.
TEST_F(ScheduleStoreTest, AFinishThatFillsTheLastSlotDoesNotWalkTheRestOfTheQueue) {
  std::vector<WorkerSlots> w = {Worker("a", 2), Worker("b", 2)};
  std::vector<std::string> running;
  for (int i = 0; i < 4; ++i) {
    JobSpec s = Spec("t");
    EXPECT_EQ(Submit(s, w).kind, SubmitOutcome::Kind::kStarted);
    running.push_back(s.id);
  }
  for (int i = 0; i < 8; ++i) EXPECT_EQ(Submit(Spec("t"), w).kind, SubmitOutcome::Kind::kQueued);
  auto commands = [&] {
    auto r = pool_->Acquire()->Command({"INFO", "stats"});
    const std::string text = r.ok() ? r->str : "";
    const size_t at = text.find("total_commands_processed:");
    return at == std::string::npos ? -1 : std::atoll(text.c_str() + at + 25);
  };
  // The job's record is loaded first (as the broker has it in memory).
  auto rec = jobs_->Load(running[0]);
  ASSERT_TRUE(rec.ok());
  JobRecord r = *rec;
  r.status = JobStatus::kSucceeded;
  const long long before = commands();
  auto fin = sched_->Finish(r, FinishExpect::kAny, w, common::NowMs());
  const long long used = commands() - before - 1;  // less the INFO
  ASSERT_TRUE(fin.ok()) << fin.status().ToString();
  EXPECT_EQ(fin->kind, FinishOutcome::Kind::kStored);
  ASSERT_EQ(fin->started.size(), 1u);
  EXPECT_EQ(Zcard("{kiln}:q:t"), 7);
  // The finish's own ~20, the start ~10, the counts once: a walk of the 7
  // left would add ~6 per entry.
  EXPECT_LT(used, 50) << "commands for one finish";
}

TEST_F(ScheduleStoreTest, WeightedRoundRobinAcrossTenants) {
  // One slot; a flood from `a` (weight 1) queued before `b` (weight 2).
  ASSERT_TRUE(sched_->PublishTenants({{"a", 0, 1}, {"b", 0, 2}}).ok());
  std::vector<WorkerSlots> w = {Worker("x", 1)};
  auto running = Submit(Spec("a"), w);
  ASSERT_EQ(running.kind, SubmitOutcome::Kind::kStarted);
  std::map<std::string, std::string> tenant_of;
  for (const char* t : {"a", "b"}) {
    for (int i = 0; i < 12; ++i) {
      auto s = Spec(t);
      tenant_of[s.id] = t;
      Submit(s, w);
    }
  }
  std::string current = "ex_1";
  std::string order;
  for (int i = 0; i < 12; ++i) {
    auto fin = End(current, w);
    ASSERT_EQ(fin.started.size(), 1u);
    current = fin.started[0].job_id;
    order += tenant_of[current];
  }
  // b is served twice per a, although all of a's jobs were queued first.
  EXPECT_EQ(std::count(order.begin(), order.end(), 'b'), 8) << order;
  EXPECT_EQ(std::count(order.begin(), order.end(), 'a'), 4) << order;
  EXPECT_EQ(order.find("aa"), std::string::npos) << order;
}

TEST_F(ScheduleStoreTest, HigherPriorityRunsFirstWithinATenant) {
  std::vector<WorkerSlots> w = {Worker("x", 1)};
  Submit(Spec("t"), w);                   // ex_1 runs
  Submit(Spec("t"), w);                   // ex_2, priority 0
  Submit(Spec("t", "", "python", 9), w);  // ex_3, priority 9
  auto rec = jobs_->Load("ex_3");
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->queue_position, 1u);
  auto fin = End("ex_1", w);
  ASSERT_EQ(fin.started.size(), 1u);
  EXPECT_EQ(fin.started[0].job_id, "ex_3");
}

TEST_F(ScheduleStoreTest, QueueFullIsRefusedAndNothingStored) {
  std::vector<WorkerSlots> w = {Worker("x", 1)};
  Submit(Spec("t"), w);
  TenantQuota quota{1, 10};
  Submit(Spec("t"), w, "", quota);
  auto full = Spec("t");
  auto st = SubmitError(full, w, quota);
  EXPECT_EQ(st.code(), common::Code::kQueueFull);
  EXPECT_EQ(jobs_->Load(full.id).status().code(), common::Code::kNotFound);
}

TEST_F(ScheduleStoreTest, IdempotencyKeyReturnsTheFirstJob) {
  std::vector<WorkerSlots> w = {Worker("x", 4)};
  auto first = Spec("t");
  EXPECT_EQ(Submit(first, w, "key-1").kind, SubmitOutcome::Kind::kStarted);
  auto again = Submit(Spec("t"), w, "key-1");
  EXPECT_EQ(again.kind, SubmitOutcome::Kind::kReplay);
  EXPECT_EQ(again.replay_id, first.id);
  // The key is per tenant.
  EXPECT_EQ(Submit(Spec("u"), w, "key-1").kind, SubmitOutcome::Kind::kStarted);
  EXPECT_EQ(Zcard("{kiln}:lease:global"), 2);
}

TEST_F(ScheduleStoreTest, SessionRunsOneAtATimeInOrderOnItsWorker) {
  std::vector<WorkerSlots> w = {Worker("a", 4), Worker("b", 4)};
  auto first = Submit(Spec("t", "s1"), w);
  ASSERT_EQ(first.kind, SubmitOutcome::Kind::kStarted);
  ASSERT_TRUE(first.session_epoch.has_value());
  EXPECT_EQ(first.session_epoch->generation, 1u);
  const std::string home = first.worker;
  // Load the other worker so least-loaded would pick it.
  Submit(Spec("t"), w);
  Submit(Spec("t"), w);
  auto second = Submit(Spec("t", "s1"), w);
  EXPECT_EQ(second.kind, SubmitOutcome::Kind::kQueued);
  EXPECT_EQ(second.wait_reason, "session");
  auto third = Submit(Spec("t", "s1"), w);
  EXPECT_EQ(third.position, 3u);
  auto fin = End("ex_1", w);
  ASSERT_EQ(fin.started.size(), 1u);
  EXPECT_EQ(fin.started[0].job_id, "ex_4");
  EXPECT_EQ(fin.started[0].worker, home);
  EXPECT_EQ(fin.started[0].session_epoch, first.session_epoch);
  fin = End("ex_4", w);
  ASSERT_EQ(fin.started.size(), 1u);
  EXPECT_EQ(fin.started[0].job_id, "ex_5");
  EXPECT_TRUE(End("ex_5", w).started.empty());
  auto list = sessions_->List("t", "");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].worker, home);
  EXPECT_EQ((*list)[0].state, "idle");
  EXPECT_EQ((*list)[0].executions, 3u);
}

TEST_F(ScheduleStoreTest, SessionWaitsForItsBusyWorkerWithoutBlockingItsTenant) {
  std::vector<WorkerSlots> w = {Worker("a", 1), Worker("b", 1)};
  auto s = Submit(Spec("t", "s1"), w);  // ex_1 binds s1
  ASSERT_EQ(s.kind, SubmitOutcome::Kind::kStarted);
  End("ex_1", w);
  // Fill s1's worker with a plain job, then queue a session job and a plain one.
  std::vector<WorkerSlots> home = {Worker(s.worker, 1)};
  ASSERT_EQ(Submit(Spec("t"), home).kind, SubmitOutcome::Kind::kStarted);  // ex_2
  auto sess = Submit(Spec("t", "s1"), w);                                  // ex_3
  EXPECT_EQ(sess.kind, SubmitOutcome::Kind::kQueued);
  EXPECT_EQ(sess.wait_reason, "worker");
  // A plain job behind it in the same tenant still starts on the other worker.
  auto started = sched_->Pump(w, common::NowMs());
  ASSERT_TRUE(started.ok());
  EXPECT_TRUE(started->empty());      // nothing else queued yet
  auto plain = Submit(Spec("t"), w);  // ex_4: queue not empty -> fifo
  EXPECT_EQ(plain.kind, SubmitOutcome::Kind::kQueued);
  started = sched_->Pump(w, common::NowMs());
  ASSERT_TRUE(started.ok());
  ASSERT_EQ(started->size(), 1u);
  EXPECT_EQ((*started)[0].job_id, "ex_4");
  EXPECT_NE((*started)[0].worker, s.worker);
}

TEST_F(ScheduleStoreTest, SessionIdsArePerTenantAndLanguageIsChecked) {
  std::vector<WorkerSlots> w = {Worker("a", 4)};
  Submit(Spec("t", "s1"), w);
  EXPECT_EQ(SubmitError(Spec("t", "s1", "shell"), w).code(),
            common::Code::kSessionLanguageMismatch);
  // Another tenant's "s1" is a session of its own, in another language even.
  EXPECT_TRUE(SubmitError(Spec("other", "s1", "shell"), w).ok());
  auto mine = sessions_->List("other", "");
  ASSERT_TRUE(mine.ok());
  ASSERT_EQ(mine->size(), 1u);
  EXPECT_EQ((*mine)[0].id, "s1");
  EXPECT_EQ((*mine)[0].language, "shell");
  EXPECT_TRUE(sessions_->Delete("other", "s1").ok());
  EXPECT_EQ(sessions_->Delete("other", "s1").status().code(), common::Code::kSessionNotFound);
  // Ours is untouched.
  EXPECT_EQ(SubmitError(Spec("t", "s1", "shell"), w).code(),
            common::Code::kSessionLanguageMismatch);
  // Per-tenant session cap.
  TenantQuota quota{100, 1};
  EXPECT_EQ(SubmitError(Spec("t", "s2"), w, quota).code(), common::Code::kSessionBusyLimit);
}

TEST_F(ScheduleStoreTest, LostWorkerLosesItsSessions) {
  std::vector<WorkerSlots> w = {Worker("a", 4)};
  Submit(Spec("t", "s1"), w);  // ex_1 running on a
  Submit(Spec("t", "s1"), w);  // ex_2 waits for the session
  auto queued = sessions_->LoseWorker("a");
  ASSERT_TRUE(queued.ok());
  ASSERT_EQ(queued->size(), 1u);
  EXPECT_EQ((*queued)[0], "ex_2");
  EXPECT_EQ(SubmitError(Spec("t", "s1"), w).code(), common::Code::kSessionLost);
  auto list = sessions_->List("t", "");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].state, "lost");
}

TEST_F(ScheduleStoreTest, ALostSessionsRequeuedExecutionIsHandedBackNotStarted) {
  // The worker died while the session's second execution was on its way
  // to it: that execution came back to the queue after the session was
  // marked lost. Started on the worker's new process, it would run in a
  // fresh interpreter under the old epoch.
  std::vector<WorkerSlots> w = {Worker("a", 4)};
  ASSERT_EQ(Submit(Spec("t", "s1"), w).kind, SubmitOutcome::Kind::kStarted);  // ex_1
  End("ex_1", w);
  ASSERT_EQ(Submit(Spec("t", "s1"), w).kind, SubmitOutcome::Kind::kStarted);  // ex_2 on a
  auto queued = sessions_->LoseWorker("a");
  ASSERT_TRUE(queued.ok());
  EXPECT_TRUE(queued->empty());  // ex_2 was running, not queued
  auto back = sched_->Requeue("ex_2", w, common::NowMs());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->size(), 1u);
  EXPECT_EQ((*back)[0].job_id, "ex_2");
  EXPECT_EQ((*back)[0].worker, "") << "a lost session's execution must not start";
  // Named again by every pump until a broker ends it.
  auto again = sched_->Pump(w, common::NowMs());
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->size(), 1u);
  EXPECT_EQ((*again)[0].worker, "");
  EXPECT_EQ(Zcard("{kiln}:lease:w:a"), 0);
  EXPECT_EQ(End("ex_2", w, FinishExpect::kQueued, JobStatus::kError).kind,
            FinishOutcome::Kind::kStored);
  again = sched_->Pump(w, common::NowMs());
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->empty());
  // New executions are refused as before.
  EXPECT_EQ(SubmitError(Spec("t", "s1"), w).code(), common::Code::kSessionLost);
}

// Redis stalls longer than the broker waits for an answer (2 s), then runs
// what waited in its socket. Returns what `call` returned meanwhile.
template <typename F>
auto DuringARedisStall(ChildProcess* redis, RedisPool* pool, F call) {
  redis->Pause();
  std::thread resume([redis] {
    std::this_thread::sleep_for(std::chrono::milliseconds(kRedisTimeoutMs + 700));
    redis->Resume();
  });
  auto out = call();
  resume.join();
  // A fresh connection's command comes after what waited.
  EXPECT_TRUE(
      WaitFor([&] { return pool->Acquire()->Command({"PING"}).ok(); }, std::chrono::seconds(5)));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  return out;
}

TEST_F(ScheduleStoreTest, ASubmitRedisRunsAfterTheBrokerGaveUpStoresNothing) {
  // The broker answered 503: a client may submit again without a key, so a
  // late script storing the job as well would run it twice.
  std::vector<WorkerSlots> w = {Worker("a", 4)};
  auto spec = Spec("t");
  auto out = DuringARedisStall(redis_, pool_.get(),
                               [&] { return sched_->Submit(spec, "", {}, w, common::NowMs()); });
  // Redis got it and did not answer: the broker cannot know the outcome.
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->kind, SubmitOutcome::Kind::kUnconfirmed);
  auto c = pool_->Acquire();
  auto exists = c->Command({"EXISTS", "{kiln}:job:" + spec.id});
  ASSERT_TRUE(exists.ok());
  EXPECT_EQ(exists->integer, 0) << "the late script stored the job the client was refused";
  EXPECT_EQ(Zcard("{kiln}:lease:global"), 0);
  // A prompt submit is stored as ever.
  EXPECT_EQ(Submit(Spec("t"), w).kind, SubmitOutcome::Kind::kStarted);
}

TEST_F(ScheduleStoreTest, AFinishRedisRunsLateStartsNothing) {
  // The broker never learns what a late script started (its answer is
  // lost): the job would stay `running` with no worker ever told.
  settings_.global_slots = 1;
  Reset();
  std::vector<WorkerSlots> w = {Worker("a", 4)};
  Submit(Spec("t"), w);                                                // ex_1 running
  ASSERT_EQ(Submit(Spec("t"), w).kind, SubmitOutcome::Kind::kQueued);  // ex_2 waits
  auto rec = jobs_->Load("ex_1");
  ASSERT_TRUE(rec.ok());
  rec->status = JobStatus::kSucceeded;
  auto fin = DuringARedisStall(redis_, pool_.get(), [&] {
    return sched_->Finish(*rec, FinishExpect::kAny, w, common::NowMs());
  });
  EXPECT_FALSE(fin.ok());
  // The end itself is stored (a retry finds it ended); ex_2 was not started.
  auto one = jobs_->Load("ex_1");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->status, JobStatus::kSucceeded);
  auto two = jobs_->Load("ex_2");
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->status, JobStatus::kQueued);
  // The next pump starts it, and says so.
  auto started = sched_->Pump(w, common::NowMs());
  ASSERT_TRUE(started.ok());
  ASSERT_EQ(started->size(), 1u);
  EXPECT_EQ((*started)[0].job_id, "ex_2");
}

TEST_F(ScheduleStoreTest, TickReportsStraysRunningOnTheBrokersName) {
  std::vector<WorkerSlots> w = {Worker("a", 4)};
  Submit(Spec("t"), w);  // ex_1 running on b1's name
  Submit(Spec("t"), w);  // ex_2 too, and held
  {
    auto c = pool_->Acquire();
    ASSERT_TRUE(c->Command({"HSET", "{kiln}:inflight:b1", "ex_gone", "a"}).ok());
  }
  const int64_t now = common::NowMs();
  std::vector<InFlightRef> held = {{"ex_2", "t", "a"}};
  // Just started: not yet a stray (it may wait in the broker's inbox).
  auto tick = sched_->Tick(held, now, 3000, {}, now - 10000);
  ASSERT_TRUE(tick.ok());
  EXPECT_TRUE(tick->strays.empty());
  tick = sched_->Tick(held, now, 3000, {}, now + 1000);
  ASSERT_TRUE(tick.ok());
  EXPECT_EQ(tick->strays, std::vector<std::string>{"ex_1"});
  // A leftover entry for a job that no longer runs is dropped.
  auto c = pool_->Acquire();
  auto left = c->Command({"HEXISTS", "{kiln}:inflight:b1", "ex_gone"});
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(left->integer, 0);
}

TEST_F(ScheduleStoreTest, DeleteSessionReturnsItsJobs) {
  std::vector<WorkerSlots> w = {Worker("a", 4)};
  auto s = Spec("t", "s1");
  s.conversation_id = "conv-1";
  Submit(s, w);                // ex_1 running
  Submit(Spec("t", "s1"), w);  // ex_2 waiting
  Submit(Spec("t", "s9"), w);  // another session, no conversation
  auto conv = sessions_->List("t", "conv-1");
  ASSERT_TRUE(conv.ok());
  ASSERT_EQ(conv->size(), 1u);
  EXPECT_EQ((*conv)[0].id, "s1");
  auto d = sessions_->Delete("t", "s1");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->running_job, "ex_1");
  ASSERT_EQ(d->queued_jobs.size(), 1u);
  EXPECT_EQ(d->queued_jobs[0], "ex_2");
  auto left = sessions_->List("t", "");
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ((*left)[0].id, "s9");
  // The running job still ends normally (its session is gone).
  EXPECT_EQ(End("ex_1", w).kind, FinishOutcome::Kind::kStored);
}

TEST_F(ScheduleStoreTest, ExpiredLeasesFreeTheirSlots) {
  settings_.global_slots = 1;
  settings_.lease_ms = 300;
  Reset();
  std::vector<WorkerSlots> w = {Worker("a", 4)};
  EXPECT_EQ(Submit(Spec("t"), w).kind, SubmitOutcome::Kind::kStarted);
  EXPECT_EQ(Submit(Spec("t"), w).kind, SubmitOutcome::Kind::kQueued);
  // A renewed lease holds...
  auto tick = sched_->Tick({{"ex_1", "t", "a"}}, common::NowMs(), 3000);
  ASSERT_TRUE(tick.ok());
  EXPECT_TRUE(tick->not_owned.empty());
  EXPECT_EQ(tick->global_leases, 1u);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  tick = sched_->Tick({{"ex_1", "t", "a"}}, common::NowMs(), 3000);
  ASSERT_TRUE(tick.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto started = sched_->Pump(w, common::NowMs());
  ASSERT_TRUE(started.ok());
  EXPECT_TRUE(started->empty());
  // ...one nobody renews comes back by itself (its broker died).
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  started = sched_->Pump(w, common::NowMs());
  ASSERT_TRUE(started.ok());
  ASSERT_EQ(started->size(), 1u);
  EXPECT_EQ((*started)[0].job_id, "ex_2");
}

TEST_F(ScheduleStoreTest, TickReportsJobsEndedElsewhereAndTenantGauges) {
  ASSERT_TRUE(sched_->PublishTenants({{"t", 0, 1}}).ok());
  std::vector<WorkerSlots> w = {Worker("a", 1)};
  Submit(Spec("t"), w);
  Submit(Spec("t"), w);
  auto tick = sched_->Tick({{"ex_1", "t", "a"}}, common::NowMs(), 3000);
  ASSERT_TRUE(tick.ok());
  ASSERT_EQ(tick->tenants.size(), 1u);
  EXPECT_EQ(tick->tenants[0].queued, 1u);
  EXPECT_EQ(tick->tenants[0].leases, 1u);
  EXPECT_EQ(tick->brokers_live, 1u);
  End("ex_1", w);  // another broker stored its result
  tick = sched_->Tick({{"ex_1", "t", "a"}}, common::NowMs(), 3000);
  ASSERT_TRUE(tick.ok());
  ASSERT_EQ(tick->not_owned.size(), 1u);
  EXPECT_EQ(tick->not_owned[0], "ex_1");
}

TEST_F(ScheduleStoreTest, ALiveBrokerTakesOverADeadOnesJobs) {
  std::vector<WorkerSlots> w = {Worker("a", 4)};
  Submit(Spec("t"), w);  // b1 owns ex_1
  ASSERT_TRUE(sched_->Tick({{"ex_1", "t", "a"}}, common::NowMs() - 10000, 3000).ok());
  settings_.broker_id = "b2";
  Reset();
  ASSERT_TRUE(sched_->Tick({}, common::NowMs(), 3000).ok());
  auto claimed = sched_->Claim(common::NowMs() - 3000, false);
  ASSERT_TRUE(claimed.ok());
  ASSERT_EQ(claimed->size(), 1u);
  EXPECT_EQ((*claimed)[0].first, "ex_1");
  EXPECT_EQ((*claimed)[0].second, "a");
  // Only once: a second claim finds nothing.
  claimed = sched_->Claim(common::NowMs() - 3000, false);
  ASSERT_TRUE(claimed.ok());
  EXPECT_TRUE(claimed->empty());
  // b2 now renews it.
  auto tick = sched_->Tick({{"ex_1", "t", "a"}}, common::NowMs(), 3000);
  ASSERT_TRUE(tick.ok());
  EXPECT_TRUE(tick->not_owned.empty());
}

TEST_F(ScheduleStoreTest, CancelOfAQueuedJobLosesToItsStart) {
  std::vector<WorkerSlots> w = {Worker("a", 1)};
  Submit(Spec("t"), w);
  Submit(Spec("t"), w);  // ex_2 queued
  // ex_2 starts (a slot frees) before the cancel arrives.
  auto fin = End("ex_1", w);
  ASSERT_EQ(fin.started.size(), 1u);
  EXPECT_EQ(End("ex_2", w, FinishExpect::kQueued, JobStatus::kCancelled).kind,
            FinishOutcome::Kind::kNotQueued);
  auto rec = jobs_->Load("ex_2");
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->status, JobStatus::kRunning);
}

TEST_F(ScheduleStoreTest, RefusedJobGoesBackToItsPlace) {
  std::vector<WorkerSlots> w = {Worker("a", 1), Worker("b", 1)};
  auto first = Submit(Spec("t"), w);
  ASSERT_EQ(first.kind, SubmitOutcome::Kind::kStarted);
  // The worker refused it: requeue without that worker.
  std::vector<WorkerSlots> others;
  for (const auto& x : w) {
    if (x.id != first.worker) others.push_back(x);
  }
  auto started = sched_->Requeue("ex_1", others, common::NowMs());
  ASSERT_TRUE(started.ok());
  ASSERT_EQ(started->size(), 1u);
  EXPECT_EQ((*started)[0].job_id, "ex_1");
  EXPECT_NE((*started)[0].worker, first.worker);
  EXPECT_EQ(Zcard("{kiln}:lease:w:" + first.worker), 0);
  EXPECT_EQ(Zcard("{kiln}:lease:global"), 1);
}

TEST_F(ScheduleStoreTest, ConcurrentSubmitsNeverExceedTheLimits) {
  // Four "brokers" submitting and finishing at once against limits.
  settings_.global_slots = 5;
  Reset();
  ASSERT_TRUE(sched_->PublishTenants({{"t0", 2, 1}, {"t1", 3, 1}}).ok());
  std::vector<WorkerSlots> w = {Worker("a", 2), Worker("b", 2), Worker("c", 2)};
  std::atomic<int> violations{0};
  std::atomic<int> ended{0};
  std::vector<std::thread> threads;
  for (int b = 0; b < 4; ++b) {
    threads.emplace_back([&, b] {
      ScheduleSettings s = settings_;
      s.broker_id = "b" + std::to_string(b);
      ScheduleStore store(pool_.get(), s);
      std::vector<std::string> mine;
      for (int i = 0; i < 40; ++i) {
        JobSpec spec;
        spec.id = "c" + std::to_string(b) + "_" + std::to_string(i);
        spec.tenant = "t" + std::to_string(i % 2);
        spec.language = "python";
        spec.created_ms = common::NowMs();
        auto out = store.Submit(spec, "", {}, w, common::NowMs());
        if (out.ok() && out->kind == SubmitOutcome::Kind::kStarted) mine.push_back(spec.id);
        if (Zcard("{kiln}:lease:global") > 5 || Zcard("{kiln}:lease:t:t0") > 2 ||
            Zcard("{kiln}:lease:t:t1") > 3 || Zcard("{kiln}:lease:w:a") > 2) {
          ++violations;
        }
        if (i % 2 == 1 && !mine.empty()) {
          JobRecord r;
          r.id = mine.back();
          r.status = JobStatus::kSucceeded;
          mine.pop_back();
          auto fin = store.Finish(r, FinishExpect::kAny, w, common::NowMs());
          if (fin.ok()) {
            ++ended;
            for (const auto& st : fin->started) mine.push_back(st.job_id);
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(violations.load(), 0);
  EXPECT_GT(ended.load(), 0);
  EXPECT_LE(Zcard("{kiln}:lease:global"), 5);
}

}  // namespace
}  // namespace kiln::broker
