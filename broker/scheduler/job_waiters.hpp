// JobWaiters: lets an HTTP thread block until its job's terminal record is
// known, without polling Redis.
//
//   auto w = waiters.Add(id);                       // before the job is dispatched
//   std::optional<JobRecord> r = waiters.Wait(w, deadline);
//
// The dispatcher calls Notify() after it has stored the terminal record; the
// EventBus does when another broker has.
// Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "broker/job/job.hpp"

namespace kiln::broker {

class JobWaiters {
 public:
  struct Slot {
    std::string id;
    std::optional<JobRecord> record;  // guarded by JobWaiters::mu_
    std::condition_variable cv;       // one per waiter: no thundering herd
  };
  using Handle = std::shared_ptr<Slot>;

  Handle Add(const std::string& id);
  // Waits until Notify(id) or the deadline; always removes the waiter.
  std::optional<JobRecord> Wait(const Handle& h, std::chrono::steady_clock::time_point deadline);
  void Notify(const JobRecord& record);
  // Whether anyone waits for the job.
  bool Waiting(const std::string& id);

 private:
  std::mutex mu_;
  std::multimap<std::string, Handle> waiting_;
};

}  // namespace kiln::broker
