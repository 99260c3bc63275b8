#include "broker/scheduler/job_waiters.hpp"

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
  auto range = waiting_.equal_range(h->id);
  for (auto it = range.first; it != range.second; ++it) {
    if (it->second == h) {
      waiting_.erase(it);
      break;
    }
  }
  return std::move(h->record);
}

void JobWaiters::Notify(const JobRecord& record) {
  std::lock_guard lock(mu_);
  auto range = waiting_.equal_range(record.id);
  for (auto it = range.first; it != range.second; ++it) {
    it->second->record = record;
    it->second->cv.notify_one();
  }
}

bool JobWaiters::Waiting(const std::string& id) {
  std::lock_guard lock(mu_);
  return waiting_.count(id) != 0;
}

}  // namespace kiln::broker
