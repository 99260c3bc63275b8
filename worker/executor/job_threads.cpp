#include "worker/executor/job_threads.hpp"

#include <utility>

#include "common/thread_name.hpp"

namespace kiln::worker {

JobThreads::~JobThreads() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  work_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void JobThreads::Run(std::function<void()> task) {
  std::unique_lock lock(mu_);
  if (idle_ > 0) {
    // Counted off now: another Run before that thread wakes must not count
    // on it too. Whichever idle thread wakes first takes it.
    --idle_;
    tasks_.push_back(std::move(task));
    lock.unlock();
    work_.notify_one();
    return;
  }
  threads_.emplace_back([this, task = std::move(task)]() mutable {
    common::NameThisThread("kiln-job");
    Loop(std::move(task));
  });
}

size_t JobThreads::Threads() const {
  std::lock_guard lock(mu_);
  return threads_.size();
}

void JobThreads::Loop(std::function<void()> task) {
  while (true) {
    task();
    task = nullptr;  // what the task captured goes now, not when the next comes
    std::unique_lock lock(mu_);
    if (stopping_) return;
    ++idle_;
    work_.wait(lock, [&] { return !tasks_.empty() || stopping_; });
    if (tasks_.empty()) return;  // stopping, with no task left for this thread
    task = std::move(tasks_.front());
    tasks_.pop_front();
  }
}

}  // namespace kiln::worker
