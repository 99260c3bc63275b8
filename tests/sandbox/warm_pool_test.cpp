// WarmPool's refill timing with real sandboxes: a sandbox a lone job took
// from the stock is replaced once the job is done (JobDone) or the hold has
// passed, not while the job runs next to it; overlapping jobs hold nothing.
#include "worker/executor/warm_pool.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <thread>

namespace kiln::worker {
namespace {

using namespace std::chrono_literals;
using runtimes::Language;

class WarmPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sandbox::SandboxConfig c;
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

  std::unique_ptr<sandbox::Sandbox> sandbox_;
  std::map<Language, runtimes::Runtime> shell_;
};

TEST_F(WarmPoolTest, RefillsWhenTheJobIsDoneNotWhileItRuns) {
  WarmPool pool(sandbox_.get(), shell_, sandbox::SandboxLimits{}, 1, nullptr, 1h);
  std::jthread refill([&](std::stop_token st) { pool.Run(st); });
  ASSERT_TRUE(Eventually([&] { return pool.Ready(Language::kShell) == 1; }))
      << "the first fill is not held";
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
  auto taken = pool.Take(Language::kShell);  // JobDone comes much later
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_TRUE(Eventually([&] { return pool.Ready(Language::kShell) == 1; }));
  pool.JobDone();
}

TEST_F(WarmPoolTest, DoesNotHoldTheRefillWhileJobsOverlap) {
  WarmPool pool(sandbox_.get(), shell_, sandbox::SandboxLimits{}, 1, nullptr, 1h);
  std::jthread refill([&](std::stop_token st) { pool.Run(st); });
  ASSERT_TRUE(Eventually([&] { return pool.Ready(Language::kShell) == 1; }));
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

}  // namespace
}  // namespace kiln::worker
