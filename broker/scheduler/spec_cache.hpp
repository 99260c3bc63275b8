// SpecCache: the specs of jobs this broker queued, kept so that when a
// script starts one (ScheduleStore's pop output, Dispatcher::StartAll) the
// dispatcher need not parse the spec JSON Redis hands back. A miss (another
// broker queued it, the entry was evicted, the broker restarted) costs only
// that parse: Redis stays the truth, this is a copy of what was stored.
//
//   cache.Put(std::move(spec));                  // after the submit script queued it
//   if (auto spec = cache.Take(id)) ... else parse the stored JSON
//
// Bounded by entries and by the bytes of everything a spec holds (code,
// input, stdin, files, env, tools' schemas and the lists; oldest out first): jobs that never start
// here (cancelled, started by another broker) only wait to be evicted. Thread-safe: HTTP threads
// put, the dispatcher's loop takes.
#pragma once

#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "broker/job/job.hpp"

namespace kiln::broker {

class SpecCache {
 public:
  static constexpr size_t kMaxEntries = 4096;
  static constexpr size_t kMaxBytes = 32u << 20;

  void Put(JobSpec spec);
  std::optional<JobSpec> Take(const std::string& job_id);

  size_t size() const;
  size_t bytes() const;

 private:
  static size_t BytesOf(const JobSpec& spec);
  void EvictLocked();

  mutable std::mutex mu_;
  std::unordered_map<std::string, JobSpec> specs_;
  std::deque<std::string> order_;  // ids, oldest first; taken ones are skipped
  size_t bytes_ = 0;
};

}  // namespace kiln::broker
