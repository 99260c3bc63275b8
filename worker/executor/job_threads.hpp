// JobThreads: the threads the Executor runs jobs on. A job takes a thread
// that waits for work if there is one, else a new thread; a thread that has
// finished its job waits for the next. Reusing threads spares each job (a
// session statement included) a clone, a fresh stack, its release and an
// exit: a sixth of the worker's CPU per session statement
// (docs/performance.md).
//
// The count grows to the most jobs ever running at once plus those still
// tearing down their sandbox (a slot is free before its thread is) and never
// shrinks: a few idle threads cost only their (untouched) stacks. Idle
// threads exit when JobThreads is destroyed, which waits for running tasks
// first. Only the Executor uses it; Run is thread-safe.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::worker {

class JobThreads {
 public:
  JobThreads() = default;
  ~JobThreads();
  JobThreads(const JobThreads&) = delete;
  JobThreads& operator=(const JobThreads&) = delete;

  // Runs `task` on a thread of its own: an idle one, else a new one. Never
  // queues behind another running task.
  void Run(std::function<void()> task);
  // Threads made so far (tests).
  size_t Threads() const;

 private:
  void Loop(std::function<void()> task);

  mutable std::mutex mu_;
  std::condition_variable work_;
  std::deque<std::function<void()>> tasks_;  // each handed to a counted idle thread
  size_t idle_ = 0;  // threads waiting for a task, minus tasks_ not yet taken
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace kiln::worker
