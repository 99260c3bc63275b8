// SubmitService: the checks and the scheduling of a new execution: the part of
// ExecutionService (used by both front ends) that submits.
//
//   SubmitService submits(config, stores, &dispatcher, &waiters, metrics, governance);
//   ASSIGN_OR_RETURN(Caller caller, AuthenticateToken(config, token));
//   ASSIGN_OR_RETURN(SubmitOutcomeForCaller out, submits.Submit(caller, body, idem_key, false));
//
// Submit authorises (tenant token, code execution enabled), counts the submit
// against the tenant's rate limit (SubmitRateLimiter; over it RATE_LIMITED),
// parses the request body (ParseSubmitRequest), applies the policy (a
// blocked job is stored rejected, as an excerpt, and audited), checks the
// Idempotency-Key and the runtime, then stores and schedules the job in one
// Redis round trip and starts or queues it. Thread-safe (its parts are); the
// caller owns any wait.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include "broker/config.hpp"
#include "broker/policy/policy.hpp"
#include "broker/scheduler/audit_writer.hpp"
#include "broker/scheduler/dispatcher.hpp"
#include "broker/scheduler/job_waiters.hpp"
#include "broker/service/rate_limiter.hpp"
#include "broker/store/audit_store.hpp"
#include "common/status.hpp"

namespace kiln::broker {

class BrokerMetrics;

// Policy, audit and submit rates, optional (tests of other parts leave them
// out). The broker shares one SubmitRateLimiter between its front ends;
// without one, a SubmitService keeps its own.
struct Governance {
  const PolicyEngine* policy = nullptr;
  AuditStore* audit = nullptr;
  AuditWriter* audit_writer = nullptr;
  SubmitRateLimiter* rate_limiter = nullptr;
};

// Who sent a request, from its token.
struct Caller {
  std::string tenant;  // empty for admin tokens
  bool admin = false;
  size_t admin_index = 0;  // which admin token: "admin:<n>" in the audit trail
};

// UNAUTHORIZED for an unknown token.
common::StatusOr<Caller> AuthenticateToken(const BrokerConfig& config, std::string_view token);

// Network on request at submit: a job that asked for `network` gets its
// tenant's allowlist (or, when it listed destinations, those, each of which
// must lie within the allowlist) and its tenant's caps; otherwise 403
// NETWORK_NOT_ALLOWED naming the field. Jobs that did not ask are untouched.
common::Status AdmitNetwork(const TenantConfig& tenant, JobSpec* spec);

struct SubmitResult {
  enum class Kind {
    kAccepted,  // a new job: status is "queued" or "awaiting_approval"
    kReplay,    // the Idempotency-Key named an earlier job: id is that job
    kBlocked,   // the policy refused it: stored rejected; `blocked` says why
    // Redis got the submit but its answer was lost: the job (`id`) may or
    // may not exist. `blocked` is the UNAVAILABLE error to answer with.
    kUnconfirmed,
  };
  Kind kind = Kind::kAccepted;
  std::string id;
  std::string status;
  bool wait = false;                               // the request asked to wait (its `wait` field)
  std::chrono::steady_clock::time_point deadline;  // for a wait: timeout + wait_grace_ms
  JobWaiters::Handle handle;  // registered before the job existed, when asked to
  common::Status blocked;     // kBlocked: SECURITY_BLOCKED and the message; kUnconfirmed
  std::string rule;           // kBlocked: the rule that blocked it
};

class SubmitService {
 public:
  SubmitService(const BrokerConfig& config, DispatcherStores stores, Dispatcher* dispatcher,
                JobWaiters* waiters, BrokerMetrics* metrics, Governance governance);

  // Errors are the API's (INVALID_REQUEST, FORBIDDEN, QUEUE_FULL,
  // RATE_LIMITED, ...; UNAVAILABLE when Redis fails). With `register_waiter`
  // and a request that asks to wait, result.handle is a JobWaiters handle for
  // the new job, which the caller must Wait() on.
  // `admit`, when set, sees the parsed request before anything is stored; an
  // error it returns refuses the submit (the HTTP API's wait quota).
  using Admit = std::function<common::Status(const JobSpec& spec)>;
  common::StatusOr<SubmitResult> Submit(const Caller& caller, std::string_view body,
                                        const std::string& idempotency_key, bool register_waiter,
                                        const Admit& admit = nullptr);

  // UNAVAILABLE for a failed store call, counted as a Redis error.
  common::Status StoreError(const common::Status& st) const;

 private:
  common::StatusOr<SubmitResult> RejectBlocked(JobSpec submitted, const PolicyVerdict& verdict);

  const BrokerConfig& config_;
  JobStore* store_;
  ScheduleStore* schedule_;
  Dispatcher* dispatcher_;
  JobWaiters* waiters_;
  BrokerMetrics* metrics_;
  Governance governance_;
  SubmitRateLimiter own_rate_limiter_;
  SubmitRateLimiter* rate_limiter_;  // governance's, else own_rate_limiter_
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace kiln::broker
