#include "broker/http/work_pool.hpp"

#include "common/thread_name.hpp"

namespace kiln::broker {

WorkPool::WorkPool(size_t threads, size_t max_queued, std::string name) : max_queued_(max_queued) {
  for (size_t i = 0; i < std::max<size_t>(1, threads); ++i) {
    threads_.emplace_back([this, name] {
      common::NameThisThread(name);
      Loop();
    });
  }
}

WorkPool::~WorkPool() { Stop(); }

bool WorkPool::TryPost(std::function<void()> task) {
  std::lock_guard lock(mu_);
  if (stopping_ || tasks_.size() >= max_queued_) return false;
  tasks_.push_back(std::move(task));
  cv_.notify_one();
  return true;
}

bool WorkPool::Post(std::function<void()> task) {
  std::lock_guard lock(mu_);
  if (stopping_) return false;
  tasks_.push_back(std::move(task));
  cv_.notify_one();
  return true;
}

void WorkPool::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    tasks_.clear();
    cv_.notify_all();
  }
  for (auto& t : threads_) t.join();
}

size_t WorkPool::queued() const {
  std::lock_guard lock(mu_);
  return tasks_.size();
}

void WorkPool::Loop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (stopping_) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace kiln::broker
