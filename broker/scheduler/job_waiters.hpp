// JobWaiters: tells whoever waits for a job's end (a blocked thread, or a
// callback) its terminal record, without polling Redis.
//
//   auto w = waiters.Add(id);                       // before the job is dispatched
//   std::optional<JobRecord> r = waiters.Wait(w, deadline);
//   auto token = waiters.Watch(id, [](const JobRecord& r, const std::string* json) { /* post */ });
//
// The dispatcher calls Notify() after it has stored the terminal record; the
// EventBus does when another broker has. While the dispatcher stores ends
// (between Storing and DoneStoring) their "done" notices are its own:
// AwaitsEndFromElsewhere() is false for them, so the EventBus does not load
// a record the dispatcher is about to hand over. A watch's callback runs once, on
// the notifying thread, without a lock held: it must only hand the record
// on (post it to a loop), never block or call back into JobWaiters.
// Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "broker/job/job.hpp"

namespace kiln::broker {

class JobWaiters {
 public:
  // `json`: the record as common::DumpJson(record.ToJson()) writes it, when
  // the notifier made it already (else null): a watch answering with it
  // need not serialize the record again.
  using Callback = std::function<void(const JobRecord&, const std::string* json)>;
  struct Slot {
    std::string id;
    std::optional<JobRecord> record;  // guarded by JobWaiters::mu_
    std::condition_variable cv;       // one per waiter: no thundering herd
    Callback callback;                // a watch: called instead of cv
  };
  using Handle = std::shared_ptr<Slot>;

  Handle Add(const std::string& id);
  // Waits until Notify(id) or the deadline; always removes the waiter.
  std::optional<JobRecord> Wait(const Handle& h, std::chrono::steady_clock::time_point deadline);

  // Calls `fn` once with the job's terminal record when Notify(id) comes.
  Handle Watch(const std::string& id, Callback fn);
  // Removes a watch; true when its callback had not run and now never will.
  bool Unwatch(const Handle& h);

  void Notify(const JobRecord& record, const std::string* json = nullptr);
  // Whether anyone waits for the job.
  bool Waiting(const std::string& id);
  // The dispatcher stores the end of job `id` (Storing) and has notified its
  // waiters, or learnt it ended elsewhere and loaded it (DoneStoring). Calls
  // pair up; the same id may be marked more than once.
  void Storing(const std::string& id);
  void DoneStoring(const std::string& id);
  // Whether anyone still waits for the job's end (not yet told it) and it is
  // not being stored here: a "done" notice for it came from another broker.
  bool AwaitsEndFromElsewhere(const std::string& id);
  // Waiters and watches registered now (for metrics and tests).
  size_t size();

 private:
  // Removes h from waiting_; true if it was there. mu_ held.
  bool EraseLocked(const Handle& h);

  std::mutex mu_;
  std::multimap<std::string, Handle> waiting_;
  std::multiset<std::string> storing_;
};

}  // namespace kiln::broker
