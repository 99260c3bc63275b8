#include "broker/service/execution_service.hpp"

#include "broker/job/lifecycle.hpp"
#include "broker/metrics/broker_metrics.hpp"
#include "common/clock.hpp"
#include "common/json/bounded_json.hpp"
#include "common/protocol/session_key.hpp"

namespace kiln::broker {
namespace {

using common::Code;
using common::Status;

// What a running job's record shows of its output: stdout and stderr
// together, the earliest bytes (docs/api.md, "Output while it runs").
constexpr size_t kRunningOutputBytes = 1u << 20;

std::string AdminName(const Caller& admin) { return "admin:" + std::to_string(admin.admin_index); }

}  // namespace

ExecutionService::ExecutionService(const BrokerConfig& config, DispatcherStores stores,
                                   Dispatcher* dispatcher, JobWaiters* waiters,
                                   UnreadBudget* unread, BrokerMetrics* metrics,
                                   Governance governance)
    : config_(config),
      stores_(stores),
      dispatcher_(dispatcher),
      unread_(unread),
      metrics_(metrics),
      governance_(governance),
      submits_(config, stores, dispatcher, waiters, metrics, governance) {}

Status ExecutionService::StoreError(const Status& st) const {
  if (metrics_) metrics_->RedisError();
  return Status(Code::kUnavailable, st.message());
}

Status ExecutionService::Visible(const Status& st) const {
  return st.code() == Code::kNotFound ? st : StoreError(st);
}

common::StatusOr<JobRecord> ExecutionService::LoadOwned(const std::string& id) const {
  auto record = stores_.jobs->Load(id);
  if (!record.ok()) return Visible(record.status());
  return record;
}

common::StatusOr<JobRecord> ExecutionService::Load(const Caller& caller,
                                                   const std::string& id) const {
  ASSIGN_OR_RETURN(JobRecord record, LoadOwned(id));
  // Another tenant's job is indistinguishable from a missing one.
  if (!caller.admin && record.tenant != caller.tenant) {
    return common::NotFound("no execution with id " + id);
  }
  return record;
}

common::StatusOr<UnreadBudget::Charge> ExecutionService::Charge(const Caller& caller,
                                                                size_t bytes) {
  const TenantConfig* tenant = caller.admin ? nullptr : FindTenant(config_, caller.tenant);
  const size_t limit =
      tenant ? TenantMaxUnreadBytes(config_, *tenant) : config_.quotas.tenant_max_unread_bytes;
  const std::string who = tenant ? tenant->name : std::string("admin");
  auto charge = unread_->TryCharge(who, bytes, limit);
  if (!charge) {
    return Status(Code::kRateLimited, "the clients of " + who + " have " +
                                          std::to_string(unread_->held(who)) +
                                          " bytes of answers they have not read yet on this broker "
                                          "(quotas.tenant_max_unread_bytes " +
                                          std::to_string(limit) + "); read them, then retry");
  }
  return charge;
}

common::StatusOr<RecordAnswer> ExecutionService::Answer(const Caller& caller,
                                                        const JobRecord& record) {
  ASSIGN_OR_RETURN(UnreadBudget::Charge charge, Charge(caller, record.ApproxJsonBytes()));
  return RecordAnswer{common::DumpJson(record.ToJson()), std::move(charge)};
}

common::StatusOr<RecordAnswer> ExecutionService::Read(const Caller& caller, const std::string& id) {
  auto peek = stores_.jobs->PeekRecord(id);
  if (!peek.ok()) return Visible(peek.status());
  if (!caller.admin && peek->tenant != caller.tenant) {
    return common::NotFound("no execution with id " + id);
  }
  if (!IsTerminal(peek->status)) {
    // Live fields join the stored record (which holds no output yet), and
    // a running job's output so far comes from its stream, bounded.
    ASSIGN_OR_RETURN(JobRecord record, Load(caller, id));
    if (record.status == JobStatus::kRunning) {
      auto so_far = stores_.jobs->ReadOutputSoFar(id, kRunningOutputBytes);
      if (!so_far.ok()) return StoreError(so_far.status());
      record.stdout_data = std::move(so_far->stdout_data);
      record.stderr_data = std::move(so_far->stderr_data);
      record.truncated = so_far->more;
    }
    return Answer(caller, record);
  }
  // A terminal record is answered as stored: charged before it is read,
  // and never parsed (one copy of up to max_output_bytes, not six).
  ASSIGN_OR_RETURN(UnreadBudget::Charge charge, Charge(caller, peek->record_bytes));
  auto text = stores_.jobs->RecordText(id);
  if (!text.ok()) return Visible(text.status());
  return RecordAnswer{std::move(*text), std::move(charge)};
}

common::StatusOr<CancelResult> ExecutionService::Cancel(const Caller& caller, const std::string& id,
                                                        const Admit& admit) {
  ASSIGN_OR_RETURN(JobRecord record, Load(caller, id));
  // Cancelling a finished job changes nothing: it is answered as it is.
  if (IsTerminal(record.status)) return CancelResult{std::move(record)};
  if (admit) RETURN_IF_ERROR(admit(record));
  ASSIGN_OR_RETURN(JobTransition t, JobLifecycle::Apply(record, {.event = JobEvent::kCancel,
                                                                 .now_ms = common::NowMs()}));
  // Queued or held jobs live in Redis: any broker ends them, unless one has
  // just started it (then the cancel below reaches it like a running one).
  if (t.Has(JobAction::kStoreEnd)) {
    auto out = dispatcher_->EndJob(t);
    if (!out.ok()) return StoreError(out.status());
    if (out->kind == FinishOutcome::Kind::kStored) return CancelResult{std::move(t.record)};
  }
  // Running: the broker that owns it tells its worker; the worker's Result
  // (reason cancelled) ends it.
  if (t.Has(JobAction::kTellWorker)) {
    if (auto st = stores_.schedule->PublishCancel(id); !st.ok()) return StoreError(st);
  }
  return CancelResult{std::move(record)};
}

common::StatusOr<std::string> ExecutionService::Approve(const Caller& admin, const std::string& id,
                                                        bool trust) {
  ASSIGN_OR_RETURN(JobRecord record, LoadOwned(id));
  // The approve script decides under Redis's lock; a job plainly not held
  // is answered without it.
  RETURN_IF_ERROR(JobLifecycle::Apply(record, {.event = JobEvent::kApprove}).status());
  auto out = dispatcher_->Approve(id, trust, AdminName(admin));
  if (!out.ok()) return StoreError(out.status());
  switch (out->kind) {
    case ApproveOutcome::Kind::kMissing:
      return common::NotFound("no execution with id " + id);
    case ApproveOutcome::Kind::kNotAwaiting:
      return common::InvalidRequest("execution " + id + " is not awaiting approval (it is " +
                                    out->status + ")");
    case ApproveOutcome::Kind::kSessionGone: {
      auto t = JobLifecycle::Apply(record,
                                   {.event = JobEvent::kSessionDeleted, .now_ms = common::NowMs()});
      if (t.ok() && t->Has(JobAction::kStoreEnd)) (void)dispatcher_->EndJob(*t);
      return std::string("cancelled");
    }
    case ApproveOutcome::Kind::kStarted:
    case ApproveOutcome::Kind::kQueued:
      break;
  }
  if (metrics_) metrics_->Approval(record.tenant, "approved");
  return std::string(out->kind == ApproveOutcome::Kind::kStarted ? "running" : "queued");
}

common::StatusOr<JobRecord> ExecutionService::Deny(const Caller& admin, const std::string& id) {
  ASSIGN_OR_RETURN(JobRecord record, LoadOwned(id));
  ASSIGN_OR_RETURN(JobTransition t, JobLifecycle::Apply(record, {.event = JobEvent::kDeny,
                                                                 .now_ms = common::NowMs(),
                                                                 .detail = AdminName(admin)}));
  auto out = dispatcher_->EndJob(t);
  if (!out.ok()) return StoreError(out.status());
  if (out->kind != FinishOutcome::Kind::kStored) {
    return common::InvalidRequest("execution " + id + " is no longer awaiting approval (it is " +
                                  out->status + ")");
  }
  if (metrics_) metrics_->Approval(record.tenant, "denied");
  return std::move(t.record);
}

common::StatusOr<std::vector<PendingApproval>> ExecutionService::PendingApprovals(
    size_t limit) const {
  auto pending = stores_.schedule->PendingApprovals(limit);
  if (!pending.ok()) return StoreError(pending.status());
  std::vector<PendingApproval> out;
  for (const auto& [id, deadline] : *pending) {
    auto spec = stores_.jobs->LoadSpec(id);
    if (!spec.ok()) continue;  // ended or expired since the list was read
    out.push_back({id, deadline, std::move(*spec)});
  }
  return out;
}

common::StatusOr<JobStore::ListPage> ExecutionService::ListExecutions(
    const Caller& caller, const std::string& tenant, const std::string& session_id,
    JobStore::ListQuery query) const {
  query.tenant = caller.tenant;
  if (caller.admin) {
    if (FindTenant(config_, tenant) == nullptr) {
      return common::InvalidRequest("tenant: an admin names a tenant with ?tenant=");
    }
    query.tenant = tenant;
  }
  if (!session_id.empty()) {
    query.session_key = common::protocol::SessionKey(query.tenant, session_id);
  }
  auto page = stores_.jobs->List(query);
  if (!page.ok()) return StoreError(page.status());
  return page;
}

common::StatusOr<std::vector<ExecutionService::TenantUsage>> ExecutionService::Usage(
    const Caller& caller, const std::string& tenant, int64_t first_day, int64_t last_day) const {
  if (!caller.admin) return Status(Code::kForbidden, "usage is read with an admin token");
  std::vector<std::string> names;
  if (!tenant.empty()) {
    if (FindTenant(config_, tenant) == nullptr) {
      return common::InvalidRequest("tenant: no tenant named '" + tenant.substr(0, 64) + "'");
    }
    names.push_back(tenant);
  } else {
    for (const auto& t : config_.tenants) names.push_back(t.name);
  }
  // One HMGET per tenant and day, in one round trip per tenant: bounded.
  constexpr int64_t kMaxDayReads = 20000;
  if (static_cast<int64_t>(names.size()) * (last_day - first_day + 1) > kMaxDayReads) {
    return common::InvalidRequest("tenant: " + std::to_string(names.size()) +
                                  " tenants over that range is too much at once; name one "
                                  "with ?tenant= or ask for fewer days");
  }
  std::vector<TenantUsage> out;
  for (const auto& name : names) {
    auto days = stores_.jobs->Usage(name, first_day, last_day);
    if (!days.ok()) return StoreError(days.status());
    out.push_back({name, std::move(*days)});
  }
  return out;
}

common::StatusOr<std::vector<SessionInfo>> ExecutionService::ListSessions(
    const Caller& caller, const std::string& tenant, const std::string& conversation_id) const {
  std::string whose = caller.tenant;
  if (caller.admin) {
    if (FindTenant(config_, tenant) == nullptr) {
      return common::InvalidRequest("tenant: an admin names a tenant with ?tenant=");
    }
    whose = tenant;
  }
  auto list = stores_.sessions->List(whose, conversation_id);
  if (!list.ok()) return StoreError(list.status());
  return list;
}

common::StatusOr<std::vector<std::string>> ExecutionService::DeleteSession(
    const Caller& caller, const std::string& session_id) {
  if (caller.admin) return Status(Code::kForbidden, "sessions are deleted with a tenant's token");
  auto deleted = stores_.sessions->Delete(caller.tenant, session_id);
  if (!deleted.ok()) {
    return deleted.status().code() == Code::kSessionNotFound ? deleted.status()
                                                             : StoreError(deleted.status());
  }
  std::vector<std::string> cancelled;
  for (const auto& id : deleted->queued_jobs) {
    auto record = stores_.jobs->Load(id);
    if (!record.ok() || record->status != JobStatus::kQueued) continue;
    auto t = JobLifecycle::Apply(*record,
                                 {.event = JobEvent::kSessionDeleted, .now_ms = common::NowMs()});
    if (t.ok() && t->Has(JobAction::kStoreEnd) && dispatcher_->EndJob(*t).ok()) {
      cancelled.push_back(id);
    }
  }
  // Its running execution (JobAction::kTellWorker of a running job; its
  // record is not read for it): the worker's Result ends it.
  if (!deleted->running_job.empty()) {
    (void)stores_.schedule->PublishCancel(deleted->running_job);
    cancelled.push_back(deleted->running_job);
  }
  // Its sandbox goes now (once a running execution has ended).
  if (!deleted->worker.empty()) {
    dispatcher_->CloseSession(deleted->worker,
                              common::protocol::SessionKey(caller.tenant, session_id));
  }
  return cancelled;
}

common::StatusOr<AuditStore::Page> ExecutionService::ReadAudit(const std::string& after,
                                                               size_t count) {
  if (!governance_.audit) return common::NotFound("the audit trail is off");
  auto page = governance_.audit->Read(after, count);
  if (!page.ok() && page.status().code() != Code::kInvalidRequest) {
    return StoreError(page.status());
  }
  return page;
}

common::StatusOr<AuditStore::VerifyReport> ExecutionService::VerifyAudit() {
  if (!governance_.audit) return common::NotFound("the audit trail is off");
  auto report = governance_.audit->Verify();
  if (!report.ok()) return StoreError(report.status());
  return report;
}

}  // namespace kiln::broker
