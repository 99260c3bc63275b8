// JobThreads with real threads: a task never waits behind a running one,
// finished threads are reused, every task runs exactly once under
// concurrent Run calls, and destruction waits for a task still running.
#include "worker/executor/job_threads.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace kiln::worker {
namespace {

using namespace std::chrono_literals;

// Tasks that block until Open(); counts how many are inside at once.
class Gate {
 public:
  void Enter() {
    std::unique_lock lock(mu_);
    ++inside_;
    changed_.notify_all();
    changed_.wait(lock, [&] { return open_; });
    --inside_;
    ++done_;
    changed_.notify_all();
  }
  bool WaitInside(int n) {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, 10s, [&] { return inside_ == n; });
  }
  bool WaitDone(int n) {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, 10s, [&] { return done_ == n; });
  }
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    changed_.notify_all();
  }
  void Close() {
    std::lock_guard lock(mu_);
    open_ = false;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  int inside_ = 0, done_ = 0;
  bool open_ = false;
};

TEST(JobThreadsTest, EveryTaskRunsAtOnceAndThreadsAreReused) {
  JobThreads threads;
  Gate gate;
  for (int i = 0; i < 4; ++i) threads.Run([&] { gate.Enter(); });
  // All four run together: none waits for a thread to come free.
  ASSERT_TRUE(gate.WaitInside(4));
  EXPECT_EQ(threads.Threads(), 4u);
  gate.Open();
  ASSERT_TRUE(gate.WaitDone(4));

  // The next round (fewer, then as many) runs on the same threads. A thread
  // counts as idle only once it waits, so give the four a moment to get there.
  std::this_thread::sleep_for(50ms);
  gate.Close();
  std::set<std::thread::id> ids;
  std::mutex ids_mu;
  for (int i = 0; i < 4; ++i) {
    threads.Run([&] {
      {
        std::lock_guard lock(ids_mu);
        ids.insert(std::this_thread::get_id());
      }
      gate.Enter();
    });
  }
  ASSERT_TRUE(gate.WaitInside(4));
  EXPECT_EQ(threads.Threads(), 4u);
  EXPECT_EQ(ids.size(), 4u);
  gate.Open();
  ASSERT_TRUE(gate.WaitDone(8));
}

TEST(JobThreadsTest, ConcurrentRunsRunEveryTaskOnce) {
  // Each caller is a slot: it runs its next task once its last one is done,
  // as the Executor does. So at most kCallers tasks run at once, and a
  // thread that finished is idle again moments later.
  constexpr int kCallers = 4, kEach = 500;
  std::atomic<int> ran{0};
  std::vector<std::atomic<int>> done_by(kCallers);  // outlives the threads
  {
    JobThreads threads;
    std::vector<std::thread> callers;
    for (int c = 0; c < kCallers; ++c) {
      callers.emplace_back([&, c] {
        std::atomic<int>& done = done_by[c];
        for (int i = 0; i < kEach; ++i) {
          threads.Run([&] {
            ++ran;
            ++done;
            done.notify_one();
          });
          for (int seen = done.load(); seen != i + 1; seen = done.load()) done.wait(seen);
        }
      });
    }
    for (auto& t : callers) t.join();
    // Reused: a new thread only when every other one was busy or had not
    // got back to waiting yet, far fewer than one per task.
    EXPECT_LT(threads.Threads(), static_cast<size_t>(kCallers * kEach / 4));
  }
  EXPECT_EQ(ran.load(), kCallers * kEach);
}

TEST(JobThreadsTest, DestructionWaitsForARunningTask) {
  std::atomic<bool> finished{false};
  std::atomic<bool> started{false};
  {
    JobThreads threads;
    threads.Run([&] {
      started = true;
      std::this_thread::sleep_for(100ms);
      finished = true;
    });
    while (!started) std::this_thread::yield();
  }
  EXPECT_TRUE(finished.load());
}

}  // namespace
}  // namespace kiln::worker
