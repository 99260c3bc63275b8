#include "broker/scheduler/job_waiters.hpp"

#include <algorithm>
#include <vector>

namespace kiln::broker {

JobWaiters::Handle JobWaiters::Add(const std::string& id) {
  auto h = std::make_shared<Slot>();
  h->id = id;
  std::lock_guard lock(mu_);
  waiting_.emplace(id, h);
  return h;
}

std::optional<JobRecord> JobWaiters::Wait(const Handle& h,
                                          std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mu_);
  h->cv.wait_until(lock, deadline, [&] { return h->record.has_value(); });
  EraseLocked(h);
  return std::move(h->record);
}

JobWaiters::Handle JobWaiters::Watch(const std::string& id, Callback fn) {
  auto h = std::make_shared<Slot>();
  h->id = id;
  h->callback = std::move(fn);
  std::lock_guard lock(mu_);
  waiting_.emplace(id, h);
  return h;
}

bool JobWaiters::Unwatch(const Handle& h) {
  std::lock_guard lock(mu_);
  return EraseLocked(h);
}

bool JobWaiters::EraseLocked(const Handle& h) {
  auto range = waiting_.equal_range(h->id);
  for (auto it = range.first; it != range.second; ++it) {
    if (it->second == h) {
      waiting_.erase(it);
      return true;
    }
  }
  return false;
}

void JobWaiters::Notify(const JobRecord& record, const std::string* json) {
  std::vector<Handle> fire;
  {
    std::lock_guard lock(mu_);
    auto range = waiting_.equal_range(record.id);
    for (auto it = range.first; it != range.second;) {
      if (it->second->callback) {
        fire.push_back(it->second);
        it = waiting_.erase(it);  // a watch fires once
      } else {
        it->second->record = record;
        it->second->cv.notify_one();
        ++it;
      }
    }
  }
  for (const auto& h : fire) h->callback(record, json);
}

bool JobWaiters::Waiting(const std::string& id) {
  std::lock_guard lock(mu_);
  return waiting_.count(id) != 0;
}

void JobWaiters::Storing(const std::string& id) {
  std::lock_guard lock(mu_);
  storing_.insert(id);
}

void JobWaiters::DoneStoring(const std::string& id) {
  std::lock_guard lock(mu_);
  if (auto it = storing_.find(id); it != storing_.end()) storing_.erase(it);
}

bool JobWaiters::AwaitsEndFromElsewhere(const std::string& id) {
  std::lock_guard lock(mu_);
  if (storing_.count(id) != 0) return false;
  // A blocked waiter that has its record stays registered until it wakes.
  auto range = waiting_.equal_range(id);
  return std::any_of(range.first, range.second,
                     [](const auto& kv) { return !kv.second->record.has_value(); });
}

size_t JobWaiters::size() {
  std::lock_guard lock(mu_);
  return waiting_.size();
}

}  // namespace kiln::broker
