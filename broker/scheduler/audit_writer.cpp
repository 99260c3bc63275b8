#include "broker/scheduler/audit_writer.hpp"

#include <thread>

#include "broker/metrics/broker_metrics.hpp"
#include "common/log/logging.hpp"

namespace kiln::broker {
namespace {

const common::SubsystemLog kLog("audit");

// Bounds memory while Redis is down: the oldest entries are dropped (and
// counted as audit errors) beyond this.
constexpr size_t kMaxQueued = 100000;

}  // namespace

void AuditWriter::Add(const JobRecord& record, const JobSpec* spec, std::string approval) {
  {
    std::lock_guard lock(mu_);
    if (queue_.size() >= kMaxQueued) {
      kLog.Error({.job = queue_.front().record.id, .tenant = queue_.front().record.tenant},
                 "audit queue full: dropping the job's entry");
      queue_.pop_front();
      if (metrics_) metrics_->AuditError();
    }
    queue_.push_back(
        {record, spec ? std::optional<JobSpec>(*spec) : std::nullopt, std::move(approval)});
  }
  cv_.notify_one();
}

void AuditWriter::Run(std::stop_token stop) {
  while (true) {
    std::deque<Pending> batch;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, stop, [&] { return !queue_.empty(); });
      batch.swap(queue_);
    }
    if (batch.empty() && stop.stop_requested()) return;
    for (auto& p : batch) Write(p);
  }
}

void AuditWriter::Write(Pending& p) {
  if (!p.spec) {
    auto spec = jobs_->LoadSpec(p.record.id);
    if (!spec.ok()) {
      kLog.Error({.job = p.record.id, .tenant = p.record.tenant}, "audit entry not written: {}",
                 spec.status().ToString());
      if (metrics_) metrics_->AuditError();
      return;
    }
    p.spec = std::move(*spec);
  }
  common::AuditEntry entry = MakeAuditEntry(*p.spec, p.record, p.approval);
  // Redis may be restarting: retry a few times before giving up on it.
  for (int attempt = 0; attempt < 5; ++attempt) {
    auto id = store_->Append(entry);
    if (id.ok()) return;
    kLog.Warn({.job = p.record.id, .tenant = p.record.tenant}, "audit append failed: {}",
              id.status().ToString());
    std::this_thread::sleep_for(std::chrono::milliseconds(200 << attempt));
  }
  if (metrics_) metrics_->AuditError();
}

}  // namespace kiln::broker
