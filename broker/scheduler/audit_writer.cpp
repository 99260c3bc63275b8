#include "broker/scheduler/audit_writer.hpp"

#include <thread>

#include "broker/metrics/broker_metrics.hpp"
#include "common/clock.hpp"
#include "common/log/logging.hpp"

namespace kiln::broker {
namespace {

const common::SubsystemLog kLog("audit");

// Bounds memory while Redis is down: the oldest entries are dropped (and
// counted as audit errors) beyond this.
constexpr size_t kMaxQueued = 100000;

}  // namespace

void AuditWriter::Add(const JobRecord& record, const JobSpec* spec, std::string approval) {
  bool wake = false;
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
    // The writer waits for a first entry, then for a batch or kLinger.
    wake = queue_.size() == 1 || queue_.size() == AuditStore::kMaxBatch;
  }
  if (wake) cv_.notify_one();
}

void AuditWriter::Run(std::stop_token stop) {
  auto next_sweep = std::chrono::steady_clock::now() + sweep_.interval;
  while (true) {
    std::deque<Pending> batch;
    {
      std::unique_lock lock(mu_);
      cv_.wait_until(lock, stop, next_sweep, [&] { return !queue_.empty(); });
      // The ends of the next moment share this round trip: appended at
      // once, each one's append would meet the next job's path in Redis
      // and on the CPU. Add() wakes this thread again only for a full batch.
      if (!queue_.empty()) {
        cv_.wait_until(lock, stop, std::chrono::steady_clock::now() + kLinger,
                       [&] { return queue_.size() >= AuditStore::kMaxBatch; });
      }
      batch.swap(queue_);
    }
    if (batch.empty() && stop.stop_requested()) return;
    WriteAll(batch);
    if (std::chrono::steady_clock::now() >= next_sweep) {
      Sweep();
      next_sweep = std::chrono::steady_clock::now() + sweep_.interval;
    }
  }
}

size_t AuditWriter::Sweep() {
  const int64_t before = common::NowMs() - sweep_.after.count();
  auto ids = store_->Pending(before, 100);
  if (!ids.ok()) return 0;  // Redis is away; the next sweep tries again
  size_t written = 0;
  for (const auto& id : *ids) {
    auto record = jobs_->Load(id);
    if (record.ok() && !IsTerminal(record->status)) continue;  // cannot be: wait
    if (!record.ok()) {
      if (record.status().code() == common::Code::kNotFound) {
        // Its record expired first: nothing left to write the entry from.
        kLog.Error({.job = id}, "audit entry never written and the job's record is gone");
        if (metrics_) metrics_->AuditError();
        (void)store_->DropPending(id);
      }
      continue;
    }
    auto approval = jobs_->Approval(id);
    Pending p{std::move(*record), std::nullopt, approval.ok() ? *approval : "none"};
    kLog.Warn({.job = id, .tenant = p.record.tenant},
              "writing the audit entry of a job whose broker did not");
    if (Write(p, /*swept=*/true)) ++written;
  }
  return written;
}

std::optional<common::AuditEntry> AuditWriter::EntryOf(Pending& p) {
  if (!p.spec) {
    auto spec = jobs_->LoadSpec(p.record.id);
    if (!spec.ok()) {
      kLog.Error({.job = p.record.id, .tenant = p.record.tenant}, "audit entry not written: {}",
                 spec.status().ToString());
      if (metrics_) metrics_->AuditError();
      return std::nullopt;
    }
    p.spec = std::move(*spec);
  }
  common::AuditEntry entry = MakeAuditEntry(*p.spec, p.record, p.approval);
  if (tools_ && !p.spec->tools.empty()) {
    auto calls = tools_->Calls(p.record.id);
    if (!calls.ok()) {
      kLog.Warn({.job = p.record.id, .tenant = p.record.tenant}, "audit: tool calls unread: {}",
                calls.status().ToString());
      return std::nullopt;  // left pending: a later sweep writes the whole entry
    }
    entry.tools = nlohmann::json::array();
    for (const auto& c : *calls) {
      entry.tools->push_back(nlohmann::json{
          {"call_id", c.call_id},
          {"name", c.name},
          {"state", c.state},
          {"arguments_sha256", c.arguments_sha256},
          {"answer_sha256",
           c.answer_sha256.empty() ? nlohmann::json() : nlohmann::json(c.answer_sha256)}});
    }
  }
  return entry;
}

bool AuditWriter::Append(const common::AuditEntry& entry, const JobRecord& record, bool swept) {
  // Redis may be restarting: retry a few times before leaving the entry to
  // a later sweep (the job stays pending in Redis).
  for (int attempt = 0; attempt < 5; ++attempt) {
    auto id = store_->Append(entry, /*only_if_pending=*/true);
    if (id.ok()) return !swept || !id->empty();
    kLog.Warn({.job = record.id, .tenant = record.tenant}, "audit append failed: {}",
              id.status().ToString());
    std::this_thread::sleep_for(std::chrono::milliseconds(200 << attempt));
  }
  if (metrics_) metrics_->AuditError();
  return false;
}

bool AuditWriter::Write(Pending& p, bool swept) {
  auto entry = EntryOf(p);
  return entry && Append(*entry, p.record, swept);
}

void AuditWriter::WriteAll(std::deque<Pending>& batch) {
  // The entries of many ended jobs in one round trip when they queued up
  // together; one the batch could not append is retried alone.
  std::vector<common::AuditEntry> entries;
  std::vector<const Pending*> owners;
  entries.reserve(batch.size());
  owners.reserve(batch.size());
  for (auto& p : batch) {
    if (auto entry = EntryOf(p)) {
      entries.push_back(std::move(*entry));
      owners.push_back(&p);
    }
  }
  if (entries.empty()) return;
  auto ids = store_->AppendMany(entries, /*only_if_pending=*/true);
  for (size_t i = 0; i < entries.size(); ++i) {
    if (!ids[i].ok()) (void)Append(entries[i], owners[i]->record, /*swept=*/false);
  }
}

}  // namespace kiln::broker
