#include "broker/service/submit_service.hpp"

#include <algorithm>

#include "broker/job/lifecycle.hpp"
#include "broker/metrics/broker_metrics.hpp"
#include "broker/service/submit_request.hpp"
#include "broker/webhook/callback_url.hpp"
#include "common/clock.hpp"
#include "common/network_policy.hpp"

namespace kiln::broker {
namespace {

using common::Code;
using common::Status;

// Right after start-up, workers may not have registered yet: a runtime
// nobody offers is not refused until this has passed.
constexpr auto kStartupGrace = std::chrono::seconds(5);

}  // namespace

Status AdmitNetwork(const TenantConfig& tenant, JobSpec* spec) {
  if (!spec->network) return Status::Ok();
  // The config loader checked every entry.
  auto policy = common::ParseDestinations(tenant.network.allow, "allow");
  if (!policy.ok() || policy->empty()) {
    return Status(Code::kNetworkNotAllowed,
                  "network: tenant " + tenant.name +
                      " may not use the network (its configuration allows no destination)");
  }
  if (spec->network_allow.empty()) {
    for (const auto& d : *policy) spec->network_allow.push_back(d.ToString());
  } else {
    for (size_t i = 0; i < spec->network_allow.size(); ++i) {
      auto d = common::ParseDestination(spec->network_allow[i]);
      if (!d.ok() || !common::Covers(*policy, *d)) {
        return Status(Code::kNetworkNotAllowed,
                      "network[" + std::to_string(i) + "]: " + spec->network_allow[i] +
                          " is not within tenant " + tenant.name + "'s allowlist");
      }
    }
  }
  spec->network_max_bytes = tenant.network.max_bytes;
  spec->network_max_connections = tenant.network.max_connections;
  return Status::Ok();
}

// A callback_url must name one of the tenant's webhooks.allow destinations:
// deliveries come from the brokers, which must not be steered elsewhere.
Status AdmitCallback(const TenantConfig& tenant, const JobSpec& spec) {
  if (spec.callback_url.empty()) return Status::Ok();
  auto url = ParseCallbackUrl(spec.callback_url);  // checked by the parse already
  auto allow = common::ParseDestinations(tenant.webhooks.allow, "allow");
  if (!url.ok() || !allow.ok() || allow->empty()) {
    return Status(Code::kForbidden, "callback_url: tenant " + tenant.name +
                                        " has no webhook destinations (webhooks.allow)");
  }
  if (!common::Matches(*allow, url->host, url->port)) {
    return Status(Code::kForbidden, "callback_url: " + url->host + ":" + std::to_string(url->port) +
                                        " is not within tenant " + tenant.name +
                                        "'s webhooks.allow");
  }
  return Status::Ok();
}

common::StatusOr<Caller> AuthenticateToken(const BrokerConfig& config, std::string_view token) {
  if (token.empty()) return Status(Code::kUnauthorized, "missing bearer token");
  for (size_t i = 0; i < config.admin_tokens.size(); ++i) {
    if (config.admin_tokens[i] == token) return Caller{"", true, i};
  }
  for (const auto& tenant : config.tenants) {
    for (const auto& t : tenant.tokens) {
      if (t == token) return Caller{tenant.name, false};
    }
  }
  return Status(Code::kUnauthorized, "unknown token");
}

SubmitService::SubmitService(const BrokerConfig& config, DispatcherStores stores,
                             Dispatcher* dispatcher, JobWaiters* waiters, BrokerMetrics* metrics,
                             Governance governance)
    : config_(config),
      store_(stores.jobs),
      schedule_(stores.schedule),
      dispatcher_(dispatcher),
      waiters_(waiters),
      metrics_(metrics),
      governance_(governance),
      own_rate_limiter_(config),
      rate_limiter_(governance.rate_limiter ? governance.rate_limiter : &own_rate_limiter_) {}

Status SubmitService::StoreError(const Status& st) const {
  if (metrics_) metrics_->RedisError();
  return Status(Code::kUnavailable, st.message());
}

common::StatusOr<SubmitResult> SubmitService::Submit(const Caller& caller, std::string_view body,
                                                     const std::string& idem_key,
                                                     bool register_waiter, const Admit& admit) {
  if (caller.admin) return Status(Code::kForbidden, "admin tokens cannot submit jobs");
  const TenantConfig* tenant = FindTenant(config_, caller.tenant);
  if (!tenant->enabled) {
    return Status(Code::kCodeExecutionDisabled,
                  "code execution is not enabled for tenant " + tenant->name);
  }
  // Before any work on the body: a flood of submits costs a lookup each.
  RETURN_IF_ERROR(rate_limiter_->Admit(*tenant).status);
  ASSIGN_OR_RETURN(JobSpec spec, ParseSubmitRequest(body, caller.tenant, config_));
  spec.isolation = tenant->isolation;  // the tenant's, never the request's
  RETURN_IF_ERROR(AdmitNetwork(*tenant, &spec));
  RETURN_IF_ERROR(AdmitCallback(*tenant, spec));
  if (governance_.policy) {
    PolicyVerdict verdict = governance_.policy->Evaluate(spec.language, spec.code);
    if (metrics_) {
      for (const auto& w : verdict.warnings) {
        metrics_->PolicyHit(spec.tenant, spec.language, w, "warn");
      }
    }
    if (verdict.blocked) return RejectBlocked(std::move(spec), verdict);
    spec.warnings = std::move(verdict.warnings);
  }
  if (admit) RETURN_IF_ERROR(admit(spec));
  SubmitResult result;
  result.wait = spec.wait;
  // Installing `packages` comes before the job's timeout starts.
  const uint64_t install = spec.packages.empty() ? 0 : common::protocol::kMaxPackageInstallMs;
  result.deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(spec.limits.timeout_ms + install + config_.wait_grace_ms);
  if (!idem_key.empty()) {
    bool ok = idem_key.size() <= 128;
    for (char c : idem_key) ok = ok && c > ' ' && c < 127;
    if (!ok) {
      return common::InvalidRequest("Idempotency-Key: 1-128 printable ASCII characters, no spaces");
    }
  }
  auto offered = [&](const std::vector<std::string>& runtimes) {
    return std::find(runtimes.begin(), runtimes.end(), spec.language) != runtimes.end();
  };
  if (!offered(dispatcher_->RuntimesAt(spec.isolation)) &&
      std::chrono::steady_clock::now() - started_ > kStartupGrace) {
    // The level is named whenever it is why: a gvisor tenant, or workers
    // offering the language at another level only.
    const bool elsewhere = offered(dispatcher_->Runtimes());
    return Status(Code::kRuntimeUnavailable, "no live worker offers " + spec.language +
                                                 (elsewhere || spec.isolation != kStandardIsolation
                                                      ? " at isolation level " + spec.isolation
                                                      : "") +
                                                 "; retry later");
  }
  TenantQuota quota{TenantMaxQueue(config_, *tenant), TenantMaxSessions(config_, *tenant)};
  quota.needs_approval = !tenant->auto_approve;
  quota.approval_deadline_ms =
      common::NowMs() + static_cast<int64_t>(config_.approval_timeout_s) * 1000;
  result.id = spec.id;
  const std::string language = spec.language;
  // Waiting starts before the job exists: it may end before Submit returns.
  if (register_waiter && result.wait) result.handle = waiters_->Add(result.id);
  // One round trip: the job is stored (before anyone learns its id) and
  // either takes its slots and a worker, or joins its tenant's queue.
  auto t0 = std::chrono::steady_clock::now();
  const int64_t decided_ms = common::NowMs();
  auto out = schedule_->Submit(spec, idem_key, quota, dispatcher_->Candidates(), decided_ms);
  if (metrics_) {
    metrics_->RedisCall(
        "submit", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  auto drop_waiter = [&] {
    if (result.handle) waiters_->Wait(result.handle, std::chrono::steady_clock::now());
    result.handle.reset();
  };
  if (!out.ok()) {
    drop_waiter();
    const Code c = out.status().code();
    return c == Code::kInternal || c == Code::kUnavailable ? StoreError(out.status())
                                                           : out.status();
  }
  if (out->kind == SubmitOutcome::Kind::kUnconfirmed) {
    drop_waiter();
    if (metrics_) metrics_->RedisError();
    // If the script did store and start it, the dispatcher sends it.
    dispatcher_->Unconfirmed(result.id, decided_ms);
    result.kind = SubmitResult::Kind::kUnconfirmed;
    result.blocked =
        Status(Code::kUnavailable,
               "Redis did not answer the submit (" + out->error + "): execution " + result.id +
                   " may have been accepted. Retrying with the same Idempotency-Key is safe; "
                   "GET /v1/executions/" +
                   result.id + " tells whether it exists");
    return result;
  }
  if (out->kind == SubmitOutcome::Kind::kReplay) {
    // A retry: the job the first request created, never a second run.
    drop_waiter();
    result.kind = SubmitResult::Kind::kReplay;
    result.id = out->replay_id;
    return result;
  }
  result.status = "queued";
  if (out->kind == SubmitOutcome::Kind::kStarted) {
    dispatcher_->Start(std::move(spec), out->worker, out->session_epoch, decided_ms);
  } else if (out->kind == SubmitOutcome::Kind::kHeld) {
    result.status = "awaiting_approval";
  } else {
    dispatcher_->Queued(std::move(spec));
  }
  if (metrics_) metrics_->Submitted(caller.tenant, language);
  return result;
}

common::StatusOr<SubmitResult> SubmitService::RejectBlocked(JobSpec submitted,
                                                            const PolicyVerdict& verdict) {
  const Status blocked = verdict.BlockStatus();
  if (metrics_) {
    metrics_->PolicyHit(submitted.tenant, submitted.language, verdict.blocked->rule, "block");
  }
  submitted.warnings = verdict.warnings;
  // What is refused is not kept whole: a bounded excerpt with the digests of
  // the submission goes to Redis and to the audit trail (docs/audit.md).
  const JobSpec spec = submitted.Excerpt();
  auto refused = JobLifecycle::Begin(spec, {.event = JobEvent::kRefuse,
                                            .now_ms = common::NowMs(),
                                            .code = blocked.code(),
                                            .detail = blocked.message()});
  if (!refused.ok()) return refused.status();
  const JobRecord& record = refused->record;
  // Stored and audited like any job, so an operator sees what was refused.
  if (auto st = store_->CreateEnded(spec, record); !st.ok()) return StoreError(st);
  if (metrics_) metrics_->Finished(record);
  if (governance_.audit_writer) governance_.audit_writer->Add(record, &spec, "none");
  SubmitResult result;
  result.kind = SubmitResult::Kind::kBlocked;
  result.id = spec.id;
  result.status = "rejected";
  result.blocked = blocked;
  result.rule = verdict.blocked->rule;
  return result;
}

}  // namespace kiln::broker
