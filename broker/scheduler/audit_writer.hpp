// AuditWriter: appends one audit entry per terminal job to the hash-chained
// audit stream (AuditStore), off the dispatcher's hot path.
//
//   AuditWriter audit(&audit_store, &jobs, metrics);
//   std::jthread t([&](std::stop_token st) { audit.Run(st); });
//   audit.Add(record, spec_or_null, "auto");   // any thread, after the end is stored
//
// Entries queue in memory and are appended by Run() in order, those that
// queue within kLinger of each other in one round trip
// (AuditStore::AppendMany); Run() drains the queue before it returns. Every
// ended job is also in Redis's pending set until its entry is written
// (AuditStore), so the entry of a job whose broker died first is not lost:
// Run() sweeps, every sweep_interval, the jobs pending for longer than
// sweep_after and writes their entries from the stored records. Appends only
// happen while the job is pending, so a job never gets two entries, however
// many brokers sweep. Add() is thread-safe; Run() belongs to one thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "broker/job/job.hpp"
#include "broker/store/audit_store.hpp"
#include "broker/store/job_store.hpp"
#include "broker/store/tool_store.hpp"

namespace kiln::broker {

class BrokerMetrics;

struct AuditSweep {
  // Long enough that the broker that ended a job has written its entry
  // (it retries through a short Redis outage first).
  std::chrono::milliseconds after{30'000};
  std::chrono::milliseconds interval{5'000};
};

class AuditWriter {
 public:
  // How long the writer gathers entries after the first before it appends
  // them (sooner once kMaxBatch are queued).
  static constexpr std::chrono::milliseconds kLinger{2};

  // `tools` (optional) gives the tool calls of jobs that declared tools.
  AuditWriter(AuditStore* store, JobStore* jobs, BrokerMetrics* metrics, AuditSweep sweep = {},
              ToolStore* tools = nullptr)
      : store_(store), jobs_(jobs), metrics_(metrics), sweep_(sweep), tools_(tools) {}

  // `spec` may be null: it is read from Redis then.
  void Add(const JobRecord& record, const JobSpec* spec, std::string approval);
  void Run(std::stop_token stop);
  // One sweep now; returns how many entries it wrote. Run() calls it.
  size_t Sweep();

 private:
  struct Pending {
    JobRecord record;
    std::optional<JobSpec> spec;
    std::string approval;
  };
  // The entry of `p`, its spec read from Redis if not kept; nullopt when it
  // cannot be built now (the job stays pending for a sweep).
  std::optional<common::AuditEntry> EntryOf(Pending& p);
  // Appends with retries through a short Redis outage. True once the entry
  // is in the stream (by another broker too, unless `swept`: then only when
  // this call wrote it).
  bool Append(const common::AuditEntry& entry, const JobRecord& record, bool swept);
  bool Write(Pending& p, bool swept = false);
  // A queue's worth at once: AuditStore::AppendMany, then one by one what it
  // could not append.
  void WriteAll(std::deque<Pending>& batch);

  AuditStore* store_;
  JobStore* jobs_;
  BrokerMetrics* metrics_;
  const AuditSweep sweep_;
  ToolStore* tools_;
  std::mutex mu_;
  std::condition_variable_any cv_;
  std::deque<Pending> queue_;
};

}  // namespace kiln::broker
