// WarmPool with real sandboxes: the refill timing (a sandbox a lone job took
// from the stock is replaced once the job is done or the hold has passed,
// not while the job runs next to it; overlapping jobs hold nothing), and the
// SessionTable built on it; and a job's thread busy polling its sandbox
// (RunJob with RunOptions::poll_without_sleep).
#include "worker/executor/warm_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "worker/executor/job_runner.hpp"
#include "worker/executor/session_runner.hpp"
#include "worker/executor/session_table.hpp"

namespace kiln::worker {
namespace {

using namespace std::chrono_literals;
using runtimes::Language;

class WarmPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sandbox::SandboxConfig c;
    c.init_path = KILN_BINARY_DIR "/bin/kiln-init";
    c.state_dir = "/tmp/kiln-sandbox-test-pool";
    c.cgroup_prefix = "kiln-test-pool";
    c.uid_base = 324000;
    c.uid_count = 50;
    auto sb = sandbox::Sandbox::Create(c);
    if (!sb.ok()) GTEST_SKIP() << "no sandbox on this host: " << sb.status().ToString();
    sandbox_ = std::move(*sb);
    auto rt = runtimes::Runtime::Create(Language::kShell, runtimes::RuntimePaths{});
    if (!rt.ok()) GTEST_SKIP() << rt.status().ToString();
    shell_.emplace(Language::kShell, *rt);
  }

  // Polls for up to 20 s.
  static bool Eventually(const std::function<bool()>& cond) {
    for (int i = 0; i < 2000; ++i) {
      if (cond()) return true;
      std::this_thread::sleep_for(10ms);
    }
    return cond();
  }

  // A shell session execution with room to run (10 s, 256 MiB, 16 pids).
  static common::protocol::Execute SessionJob(const std::string& session, const std::string& tenant,
                                              const std::string& code) {
    common::protocol::Execute job;
    job.job_id = "j-" + session;
    job.language = "shell";
    job.session_id = session;
    job.session_epoch = 1;
    job.tenant = tenant;
    job.session_ttl_ms = 60000;
    job.limits.timeout_ms = 10000;
    job.limits.memory_mb = 256;
    job.limits.max_pids = 16;
    job.code = code;
    return job;
  }

  std::unique_ptr<sandbox::Sandbox> sandbox_;
  std::map<Language, runtimes::Runtime> shell_;
};

TEST_F(WarmPoolTest, RefillsWhenTheJobIsDoneNotWhileItRuns) {
  WarmPool pool(sandbox_.get(), shell_, sandbox::SandboxLimits{}, 1, nullptr, 1h);
  std::jthread refill([&](std::stop_token st) { pool.Run(st); });
  ASSERT_TRUE(Eventually([&] { return pool.Ready(Language::kShell) == 1; }))
      << "the first fill is not held";
  std::this_thread::sleep_for(kSettledAge + 20ms);
  auto taken = pool.Take(Language::kShell);
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  std::this_thread::sleep_for(300ms);  // a shell sandbox starts in a few ms
  EXPECT_EQ(pool.Ready(Language::kShell), 0u) << "refilled while the job runs";
  pool.JobDone();
  EXPECT_TRUE(Eventually([&] { return pool.Ready(Language::kShell) == 1; }));
}

TEST_F(WarmPoolTest, RefillsAfterTheHoldWhenTheJobRunsLong) {
  WarmPool pool(sandbox_.get(), shell_, sandbox::SandboxLimits{}, 1, nullptr, 50ms);
  std::jthread refill([&](std::stop_token st) { pool.Run(st); });
  ASSERT_TRUE(Eventually([&] { return pool.Ready(Language::kShell) == 1; }));
  std::this_thread::sleep_for(kSettledAge + 20ms);
  auto taken = pool.Take(Language::kShell);  // JobDone comes much later
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_TRUE(Eventually([&] { return pool.Ready(Language::kShell) == 1; }));
  pool.JobDone();
}

TEST_F(WarmPoolTest, DoesNotHoldTheRefillWhileJobsOverlap) {
  WarmPool pool(sandbox_.get(), shell_, sandbox::SandboxLimits{}, 1, nullptr, 1h);
  std::jthread refill([&](std::stop_token st) { pool.Run(st); });
  ASSERT_TRUE(Eventually([&] { return pool.Ready(Language::kShell) == 1; }));
  std::this_thread::sleep_for(kSettledAge + 20ms);
  auto first = pool.Take(Language::kShell);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(pool.Ready(Language::kShell), 0u) << "refilled while the lone job runs";
  auto second = pool.Take(Language::kShell);  // the stock is empty: started now
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_TRUE(Eventually([&] { return pool.Ready(Language::kShell) == 1; }))
      << "two jobs in flight: the stock is refilled at once";
  pool.JobDone();
  pool.JobDone();
}

// Jobs that come faster than sandboxes start (back to back, one client) find
// young sandboxes or none: holding the refill would only make the next job
// wait for a build.
TEST_F(WarmPoolTest, DoesNotHoldTheRefillForAYoungSandbox) {
  WarmPool pool(sandbox_.get(), shell_, sandbox::SandboxLimits{}, 1, nullptr, 1h);
  std::jthread refill([&](std::stop_token st) { pool.Run(st); });
  // A loaded host may let the sandbox settle before the Take: try again then
  // (a settled one holds the refill until JobDone, which follows at once).
  for (int attempt = 0; attempt < 20; ++attempt) {
    ASSERT_TRUE(Eventually([&] { return pool.Ready(Language::kShell) == 1; }));
    auto taken = pool.Take(Language::kShell);
    ASSERT_TRUE(taken.ok()) << taken.status().ToString();
    if (common::SteadyClock::now() - taken->spawned_at >= kSettledAge) {
      pool.JobDone();
      continue;
    }
    EXPECT_TRUE(Eventually([&] { return pool.Ready(Language::kShell) == 1; }))
        << "held the refill for a sandbox taken young";
    pool.JobDone();
    return;
  }
  FAIL() << "every sandbox had settled before it was taken";
}

// A Take() that finds the stock empty while the refill builds a sandbox
// gets that one instead of building a second next to it: the sandbox it
// gets began building before it was called.
TEST_F(WarmPoolTest, AnEmptyStockWaitsForTheSandboxBeingBuilt) {
  WarmPool pool(sandbox_.get(), shell_, sandbox::SandboxLimits{}, 1, nullptr, 1h);
  std::jthread refill([&](std::stop_token st) { pool.Run(st); });
  bool caught = false;
  for (int attempt = 0; attempt < 50 && !caught; ++attempt) {
    ASSERT_TRUE(Eventually([&] { return pool.Ready(Language::kShell) == 1; }));
    auto first = pool.Take(Language::kShell);  // young: the refill starts at once
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    // Catch the refill mid-build (a shell sandbox builds in a few ms).
    auto until = common::SteadyClock::now() + 5s;
    while (!pool.Refilling(Language::kShell) && pool.Ready(Language::kShell) == 0 &&
           common::SteadyClock::now() < until) {
      std::this_thread::sleep_for(50us);
    }
    if (pool.Refilling(Language::kShell)) {
      auto called = common::SteadyClock::now();
      auto second = pool.Take(Language::kShell);
      ASSERT_TRUE(second.ok()) << second.status().ToString();
      auto began =
          second->spawned_at - std::chrono::duration_cast<common::SteadyClock::duration>(
                                   std::chrono::duration<double, std::milli>(second->spawn_ms));
      EXPECT_LT(began, called) << "built a second sandbox next to the refill's";
      caught = true;
      pool.JobDone();
    }
    pool.JobDone();
  }
  EXPECT_TRUE(caught) << "never caught the refill building";
}

// The broker sends a session's next execution on the previous one's Result,
// and the worker freezes the session after that Result has left: an Acquire
// arriving meanwhile waits for the Release instead of refusing the
// execution (a refusal is the job's INTERNAL error).
TEST_F(WarmPoolTest, ASessionAcquiredWhileBusyWaitsForItsRelease) {
  WarmPool pool(sandbox_.get(), shell_, sandbox::SandboxLimits{}, 0, nullptr);
  SessionTable table(&pool);
  common::protocol::Execute job;
  job.job_id = "j1";
  job.language = "shell";
  job.session_id = "s1";
  job.session_epoch = 1;
  job.tenant = "t";
  job.session_ttl_ms = 60000;
  auto first = table.Acquire(job);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  std::atomic<bool> got{false};
  common::Status second_status = common::Internal("not run");
  std::thread second([&] {
    auto lease = table.Acquire(job);
    second_status = lease.status();
    got = true;
    if (lease.ok()) table.Release(lease->session, false);
  });
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(got) << "did not wait for the running execution";
  table.Release(first->session, false);
  second.join();
  EXPECT_TRUE(second_status.ok()) << second_status.ToString();
}

// Idle sessions' memory is bounded per tenant and per worker: past a budget
// the least recently used idle sessions are destroyed (their next execution
// starts afresh). Each session here keeps a 24 MiB file on its tmpfs
// workspace, charged to its cgroup.
TEST_F(WarmPoolTest, IdleSessionsOverTheirMemoryBudgetAreReclaimedOldestFirst) {
  WarmPool pool(sandbox_.get(), shell_, sandbox::SandboxLimits{}, 0, nullptr);
  SessionTable table(&pool, {.worker_bytes = 110ull << 20, .tenant_bytes = 60ull << 20});
  const runtimes::Runtime& shell = shell_.at(Language::kShell);
  auto run = [&](const std::string& session, const std::string& tenant) {
    common::protocol::Execute job =
        SessionJob(session, tenant, "head -c 25165824 /dev/zero > /workspace/ballast");
    auto lease = table.Acquire(job);
    EXPECT_TRUE(lease.ok()) << lease.status().ToString();
    if (!lease.ok()) return size_t{0};
    SessionRun r = RunSessionExecution(job, *lease->session, shell, RunOptions{}, -1, 2s);
    EXPECT_EQ(r.result.reason, common::protocol::EndReason::kExit) << r.result.worker_error;
    bool destroy = r.destroy || !FreezeBetweenExecutions(*lease->session);
    return table.Release(lease->session, destroy);
  };
  EXPECT_EQ(run("a1", "a"), 0u);
  EXPECT_GE(table.IdleBytes(), 24ull << 20) << "the ballast is not counted";
  EXPECT_EQ(run("a2", "a"), 0u);  // a: ~50 of 60 MiB
  EXPECT_EQ(table.size(), 2u);
  EXPECT_EQ(run("a3", "a"), 1u) << "tenant a over its 60 MiB";
  EXPECT_EQ(table.size(), 2u);
  EXPECT_EQ(run("b1", "b"), 0u);
  EXPECT_EQ(run("b2", "b"), 0u);  // ~100 of 110 MiB on the worker
  EXPECT_EQ(run("c1", "c"), 1u) << "the worker over its 110 MiB";
  EXPECT_EQ(table.size(), 4u);
  // The oldest went first: a1 (tenant a), then a2 (the worker's oldest).
  common::protocol::Execute again;
  again.job_id = "again";
  again.language = "shell";
  again.session_epoch = 1;
  again.tenant = "a";
  for (const char* id : {"a1", "a2"}) {
    again.session_id = id;
    auto lease = table.Acquire(again);
    ASSERT_TRUE(lease.ok());
    EXPECT_TRUE(lease->state_lost) << id << " was not reclaimed";
    table.Release(lease->session, true);
  }
}

// With a stop delay, a session is left running after an execution (Rest)
// and stopped once it has been idle that long: a busy loop its code left
// behind keeps running in between, and that CPU counts to the next
// execution, which needs no resume; once stopped the loop gets no CPU, and
// the next execution resumes the session as usual.
TEST_F(WarmPoolTest, ASessionLeftRunningIsStoppedLaterAndBilledForTheGap) {
  WarmPool pool(sandbox_.get(), shell_, sandbox::SandboxLimits{}, 0, nullptr);
  constexpr auto kStopAfter = 600ms;
  SessionTable table(&pool, {}, kStopAfter);
  const runtimes::Runtime& shell = shell_.at(Language::kShell);
  std::shared_ptr<SessionSandbox> session;
  auto run = [&](const std::string& code, std::vector<common::protocol::FileEntry> files = {}) {
    common::protocol::Execute job = SessionJob("gap", "t", code);
    job.files = std::move(files);
    auto lease = table.Acquire(job);
    EXPECT_TRUE(lease.ok()) << lease.status().ToString();
    if (!lease.ok()) return common::protocol::Result{};
    SessionRun r = RunSessionExecution(job, *lease->session, shell, RunOptions{}, -1, 2s);
    if (job.files.empty()) {
      EXPECT_EQ(r.result.reason, common::protocol::EndReason::kExit) << r.result.worker_error;
    }
    EXPECT_FALSE(r.destroy);
    session = lease->session;
    table.Rest(lease->session);
    return r.result;
  };
  auto cpu_over = [&](std::chrono::milliseconds span) {
    const double before = session->sandbox.process->CpuMs();
    std::this_thread::sleep_for(span);
    return session->sandbox.process->CpuMs() - before;
  };
  run("( while :; do :; done ) &");
  const auto rested = std::chrono::steady_clock::now();
  // Left running: the loop burns CPU (even beside two busy loops of the
  // host's, it gets a good part of a core).
  EXPECT_GT(cpu_over(200ms), 40) << "stopped at once";
  std::this_thread::sleep_until(rested + 350ms);
  auto billed = run("echo ok");
  EXPECT_EQ(billed.stdout_data, "ok\n");
  EXPECT_GT(billed.cpu_ms, 100) << "the loop's CPU since the last execution was not counted";
  // Stopped once idle for the delay (its stop runs on the table's thread).
  std::this_thread::sleep_for(kStopAfter + 1s);
  EXPECT_LT(cpu_over(300ms), 20) << "still running after the stop delay";
  auto resumed = run("echo again");
  EXPECT_EQ(resumed.stdout_data, "again\n");
  EXPECT_LT(resumed.cpu_ms, 150) << "billed for time it spent stopped";
  // An execution refused before its code runs (a file path out of the
  // workspace) leaves a stopped session stopped: the next one resumes it
  // (not taken for left running, it would wait for its timeout).
  std::this_thread::sleep_for(kStopAfter + 1s);
  auto refused = run("echo never", {{"../escape", "x"}});
  EXPECT_EQ(refused.reason, common::protocol::EndReason::kError);
  const auto start = std::chrono::steady_clock::now();
  auto after = run("echo after");
  EXPECT_EQ(after.stdout_data, "after\n") << after.worker_error;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

// What a session left running grows after its execution counts once the
// stopper has stopped it: past the tenant's idle budget, the tenant's least
// recently used idle session is reclaimed then, not at its next release.
TEST_F(WarmPoolTest, ASessionThatGrowsWhileLeftRunningIsCountedOnceStopped) {
  WarmPool pool(sandbox_.get(), shell_, sandbox::SandboxLimits{}, 0, nullptr);
  constexpr auto kStopAfter = 300ms;
  SessionTable table(&pool, {.tenant_bytes = 60ull << 20}, kStopAfter);
  const runtimes::Runtime& shell = shell_.at(Language::kShell);
  auto run = [&](const std::string& session, const std::string& code) {
    common::protocol::Execute job = SessionJob(session, "t", code);
    auto lease = table.Acquire(job);
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    SessionRun r = RunSessionExecution(job, *lease->session, shell, RunOptions{}, -1, 2s);
    EXPECT_EQ(r.result.reason, common::protocol::EndReason::kExit) << r.result.worker_error;
    EXPECT_EQ(table.Rest(lease->session), 0u) << "reclaimed at the release already";
  };
  run("old", "head -c 25165824 /dev/zero > /workspace/ballast");  // 24 MiB
  // Small at its release; 40 MiB more 100 ms later, while left running.
  run("grow", "( sleep 0.1; head -c 41943040 /dev/zero > /workspace/late ) &");
  EXPECT_EQ(table.size(), 2u);
  EXPECT_TRUE(Eventually([&] { return table.size() == 1; }))
      << "the grown session's memory was not counted once it was stopped";
  auto lease = table.Acquire(SessionJob("old", "t", "true"));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_TRUE(lease->state_lost) << "not the least recently used one went";
  table.Release(lease->session, true);
}

// A one-shot job's thread polls its sandbox without sleeping for as long as
// the Executor asked (BusyPoll), and sleeps in poll() otherwise: whether the
// thread went to sleep while a job slept 300 ms tells which (its voluntary
// context switches; its CPU time depends on what else the host runs, as the
// polling thread yields to anything runnable).
TEST_F(WarmPoolTest, AJobThreadPollsItsSandboxOnlyWhenAsked) {
  WarmPool pool(sandbox_.get(), shell_, sandbox::SandboxLimits{}, 0, nullptr);
  const runtimes::Runtime& runtime = shell_.at(Language::kShell);
  auto sleeps = [] {  // this thread's voluntary context switches so far
    std::ifstream in("/proc/thread-self/status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.starts_with("voluntary_ctxt_switches:")) return std::stol(line.substr(24));
    }
    return -1L;
  };
  auto run = [&](std::chrono::microseconds poll) {
    auto sb = pool.Take(Language::kShell);
    EXPECT_TRUE(sb.ok()) << sb.status().ToString();
    if (!sb.ok()) return -1L;
    common::protocol::Execute job;
    job.job_id = "busy-poll";
    job.language = "shell";
    job.code = "sleep 0.3; echo done";
    job.limits.timeout_ms = 10'000;
    job.limits.memory_mb = 256;
    job.limits.max_pids = 16;
    RunOptions opts;
    opts.poll_without_sleep = poll;
    const long before = sleeps();
    common::protocol::Result r = RunJob(job, *sb, runtime, opts, -1);
    const long slept = sleeps() - before;
    EXPECT_EQ(r.stdout_data, "done\n") << r.worker_error << r.stderr_data;
    pool.JobDone();
    return slept;
  };
  const long sleeping = run(0us);
  const long polling = run(10s);  // the whole job
  std::printf("voluntary context switches: %ld sleeping, %ld polling\n", sleeping, polling);
  // Polling, the thread may still sleep once or twice outside the loop (a
  // cgroup write, the reaping); sleeping, it waits in poll() each time the
  // sandbox has nothing to say (6-9 times here).
  EXPECT_LE(polling, 2);
  EXPECT_GE(sleeping, polling + 3);
}

}  // namespace
}  // namespace kiln::worker
