// ExecutionService: what a client may do with executions and sessions —
// submit, read, cancel, approve, deny, list and delete sessions, read the
// audit trail — with every business rule in one place. The HTTP API and the
// native client API only parse requests, authenticate (AuthenticateToken),
// wait, and map the Status codes returned here onto their wire.
//
//   ExecutionService service(config, stores, &dispatcher, &waiters, &unread, metrics, governance);
//   ASSIGN_OR_RETURN(SubmitResult out, service.Submit(caller, body, idem_key, true));
//   ASSIGN_OR_RETURN(CancelResult c, service.Cancel(caller, id));
//
// Decisions about a job's state come from JobLifecycle; the service carries
// out the resulting actions (Dispatcher::EndJob for kStoreEnd, a published
// cancel for kTellWorker). Errors are the API's codes: NOT_FOUND (also for
// another tenant's job), INVALID_REQUEST, FORBIDDEN, RATE_LIMITED (a
// tenant's unread answers), UNAVAILABLE (Redis, counted as a Redis error).
// Thread-safe: called from HTTP pool threads and the native loop at once.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "broker/config.hpp"
#include "broker/job/job.hpp"
#include "broker/scheduler/dispatcher.hpp"
#include "broker/scheduler/job_waiters.hpp"
#include "broker/service/submit_service.hpp"
#include "broker/store/audit_store.hpp"
#include "broker/store/job_store.hpp"
#include "broker/store/session_store.hpp"
#include "broker/stream/unread_budget.hpp"
#include "common/status.hpp"

namespace kiln::broker {

class BrokerMetrics;

// A record as a client receives it: its JSON text and the charge that holds
// its bytes against the caller's UnreadBudget until the answer is written.
struct RecordAnswer {
  std::string json;
  UnreadBudget::Charge charge;
};

struct CancelResult {
  // The job's record after the cancel was carried out: terminal when it was
  // already over or ended here (queued, held); still running when its worker
  // was told and its Result will end it.
  JobRecord record;
};

// One execution awaiting an admin's decision.
struct PendingApproval {
  std::string id;
  int64_t expires_ms = 0;
  JobSpec spec;
};

class ExecutionService {
 public:
  ExecutionService(const BrokerConfig& config, DispatcherStores stores, Dispatcher* dispatcher,
                   JobWaiters* waiters, UnreadBudget* unread, BrokerMetrics* metrics,
                   Governance governance);

  // See SubmitService::Submit.
  common::StatusOr<SubmitResult> Submit(const Caller& caller, std::string_view body,
                                        const std::string& idempotency_key, bool register_waiter,
                                        const SubmitService::Admit& admit = nullptr) {
    return submits_.Submit(caller, body, idempotency_key, register_waiter, admit);
  }

  // The job's current record, live fields joined, if the caller may see it.
  common::StatusOr<JobRecord> Load(const Caller& caller, const std::string& id) const;
  // Load without the caller check, for a job the caller was already shown
  // (a wait that outlives its request's checks).
  common::StatusOr<JobRecord> LoadOwned(const std::string& id) const;
  // The record as the client receives it, charged: a terminal record as
  // stored (charged before it is read, never parsed), a live one rendered.
  common::StatusOr<RecordAnswer> Read(const Caller& caller, const std::string& id);
  // `record` rendered and charged to the caller.
  common::StatusOr<RecordAnswer> Answer(const Caller& caller, const JobRecord& record);
  // `bytes` against the caller's UnreadBudget, or RATE_LIMITED saying why.
  common::StatusOr<UnreadBudget::Charge> Charge(const Caller& caller, size_t bytes);

  // Cancels the job (JobEvent::kCancel). `admit`, when set, sees a job that
  // is not over yet before anything changes; its error refuses the cancel
  // (the HTTP API's wait quota). A finished job is answered as it is.
  using Admit = std::function<common::Status(const JobRecord& record)>;
  common::StatusOr<CancelResult> Cancel(const Caller& caller, const std::string& id,
                                        const Admit& admit = nullptr);

  // Admin decisions on a held job. Approve answers the job's status after
  // it ("running", "queued", or "cancelled" when its session went away).
  common::StatusOr<std::string> Approve(const Caller& admin, const std::string& id, bool trust);
  common::StatusOr<JobRecord> Deny(const Caller& admin, const std::string& id);
  common::StatusOr<std::vector<PendingApproval>> PendingApprovals(size_t limit) const;

  // A page of a tenant's executions, newest first (GET /v1/executions; an
  // admin names the tenant). `session_id` (the tenant's id, "" for any)
  // and the caller's tenant fill query.session_key and query.tenant.
  common::StatusOr<JobStore::ListPage> ListExecutions(const Caller& caller,
                                                      const std::string& tenant,
                                                      const std::string& session_id,
                                                      JobStore::ListQuery query) const;
  // Usage per UTC day from `first_day` to `last_day` (day numbers) of one
  // tenant, or of every configured tenant when `tenant` is empty (GET
  // /v1/usage, admins only).
  struct TenantUsage {
    std::string tenant;
    std::vector<JobStore::DayUsage> days;
  };
  common::StatusOr<std::vector<TenantUsage>> Usage(const Caller& caller, const std::string& tenant,
                                                   int64_t first_day, int64_t last_day) const;
  // A tenant's sessions (an admin names the tenant).
  common::StatusOr<std::vector<SessionInfo>> ListSessions(const Caller& caller,
                                                          const std::string& tenant,
                                                          const std::string& conversation_id) const;
  // Deletes a tenant's session: its queued executions end cancelled, its
  // running one is cancelled, its sandbox closed. Answers the ids cancelled.
  common::StatusOr<std::vector<std::string>> DeleteSession(const Caller& caller,
                                                           const std::string& session_id);

  // The audit trail (NOT_FOUND when it is off).
  common::StatusOr<AuditStore::Page> ReadAudit(const std::string& after, size_t count);
  common::StatusOr<AuditStore::VerifyReport> VerifyAudit();

  // UNAVAILABLE for a failed store call, counted as a Redis error.
  common::Status StoreError(const common::Status& st) const;

 private:
  // A store error as the client sees it: NOT_FOUND passes, others UNAVAILABLE.
  common::Status Visible(const common::Status& st) const;

  const BrokerConfig& config_;
  DispatcherStores stores_;
  Dispatcher* dispatcher_;
  UnreadBudget* unread_;
  BrokerMetrics* metrics_;
  Governance governance_;
  SubmitService submits_;
};

}  // namespace kiln::broker
