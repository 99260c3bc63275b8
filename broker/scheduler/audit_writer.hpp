// AuditWriter: appends one audit entry per terminal job to the hash-chained
// audit stream (AuditStore), off the dispatcher's hot path.
//
//   AuditWriter audit(&audit_store, &jobs, metrics);
//   std::jthread t([&](std::stop_token st) { audit.Run(st); });
//   audit.Add(record, spec_or_null, "auto");   // any thread, after the end is stored
//
// Entries queue in memory and are appended by Run() in order; Run() drains
// the queue before it returns. A job whose end was stored but whose entry was
// still queued when the broker crashed has no entry (docs/audit.md). Add()
// is thread-safe; Run() belongs to one thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>

#include "broker/job/job.hpp"
#include "broker/store/audit_store.hpp"
#include "broker/store/job_store.hpp"

namespace kiln::broker {

class BrokerMetrics;

class AuditWriter {
 public:
  AuditWriter(AuditStore* store, JobStore* jobs, BrokerMetrics* metrics)
      : store_(store), jobs_(jobs), metrics_(metrics) {}

  // `spec` may be null: it is read from Redis then.
  void Add(const JobRecord& record, const JobSpec* spec, std::string approval);
  void Run(std::stop_token stop);

 private:
  struct Pending {
    JobRecord record;
    std::optional<JobSpec> spec;
    std::string approval;
  };
  void Write(Pending& p);

  AuditStore* store_;
  JobStore* jobs_;
  BrokerMetrics* metrics_;
  std::mutex mu_;
  std::condition_variable_any cv_;
  std::deque<Pending> queue_;
};

}  // namespace kiln::broker
