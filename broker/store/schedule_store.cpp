#include "broker/store/schedule_store.hpp"

#include <algorithm>
#include <cmath>

#include "broker/job/isolation.hpp"
#include "broker/store/schedule_scripts.hpp"
#include "broker/store/usage_days.hpp"
#include "common/clock.hpp"
#include "common/json/bounded_json.hpp"
#include "common/protocol/session_key.hpp"

namespace kiln::broker {
namespace {

using common::Code;
using common::Status;

Status Malformed(const char* script) {
  return common::Internal(std::string("redis: unexpected reply from the ") + script + " script");
}

std::optional<SessionEpoch> Epoch(const RedisReply& r) { return SessionEpoch::Parse(r.str); }

// The pop output of a script: id, worker, spec, epoch per started job.
common::StatusOr<std::vector<StartedJob>> ParseStarted(const RedisReply& r, const char* script,
                                                       int64_t decided_ms) {
  std::vector<StartedJob> out;
  if (r.type != RedisReply::Type::kArray || r.elements.size() % 4 != 0) return Malformed(script);
  for (size_t i = 0; i < r.elements.size(); i += 4) {
    out.push_back({r.elements[i].str, r.elements[i + 1].str, r.elements[i + 2].str,
                   Epoch(r.elements[i + 3]), decided_ms});
  }
  return out;
}

// A script that may start jobs and runs later than this after the broker
// sent it starts nothing (and a submit stores nothing): the broker has
// stopped waiting (kRedisTimeoutMs). The margin covers clock skew between
// broker and Redis.
constexpr int64_t kFenceMs = kRedisTimeoutMs - 500;

Code CodeFromName(const std::string& name) {
  for (Code c : {Code::kUnavailable, Code::kQueueFull, Code::kSessionForbidden,
                 Code::kSessionLanguageMismatch, Code::kSessionLost, Code::kSessionBusyLimit}) {
    if (name == common::CodeName(c)) return c;
  }
  return Code::kInternal;
}

}  // namespace

size_t ScheduleStore::AppendContext(std::vector<std::string>* args,
                                    const std::vector<WorkerSlots>& workers, int64_t now_ms) const {
  args->push_back(std::to_string(now_ms));
  const size_t deadline_at = args->size();
  args->push_back("0");  // EvalFenced sets it
  args->push_back(std::to_string(settings_.lease_ms));
  args->push_back(settings_.broker_id);
  args->push_back(std::to_string(settings_.global_slots));
  args->push_back(std::to_string(settings_.sessions_per_worker));
  args->push_back(std::to_string(settings_.scan));
  args->push_back(std::to_string(settings_.budget));
  args->push_back(std::to_string(workers.size()));
  for (const auto& w : workers) {
    args->push_back(w.id);
    args->push_back(std::to_string(w.slots));
    args->push_back(w.runtimes);
  }
  return deadline_at;
}

common::StatusOr<RedisReply> ScheduleStore::EvalFenced(const RedisScript& script,
                                                       std::vector<std::string>* args,
                                                       size_t deadline_at, bool* unanswered) {
  auto conn = pool_->Acquire();
  // From now: waiting for a pooled connection is not Redis's delay.
  (*args)[deadline_at] = std::to_string(common::NowMs() + kFenceMs);
  auto reply = conn->Eval(script, *args);
  if (unanswered != nullptr) *unanswered = !reply.ok() && conn->unanswered();
  return reply;
}

Status ScheduleStore::PublishTenants(const std::vector<TenantShare>& tenants) {
  if (tenants.empty()) return Status::Ok();
  std::vector<std::string> cmd = {"HSET", keys::kTenants};
  for (const auto& t : tenants) {
    cmd.push_back(t.name);
    cmd.push_back(std::to_string(t.slots) + " " + std::to_string(t.weight));
  }
  auto conn = pool_->Acquire();
  auto r = conn->Pipeline({cmd});
  return r.ok() ? Status::Ok() : r.status().WithContext("publishing tenant limits");
}

common::StatusOr<SubmitOutcome> ScheduleStore::Submit(const JobSpec& spec,
                                                      const std::string& idempotency_key,
                                                      const TenantQuota& quota,
                                                      const std::vector<WorkerSlots>& workers,
                                                      int64_t now_ms) {
  std::vector<std::string> args = {
      spec.id,
      spec.tenant,
      spec.language,
      spec.session_id.empty() ? "" : common::protocol::SessionKey(spec.tenant, spec.session_id),
      std::to_string(spec.priority),
      std::to_string(settings_.job_ttl_s),
      common::DumpJson(spec.ToJson()),
      spec.warnings.empty() ? "" : common::DumpJson(spec.warnings),
      idempotency_key,
      std::to_string(quota.max_queue),
      std::to_string(quota.max_sessions),
      std::to_string(settings_.session_ttl_ms),
      spec.conversation_id,
      std::to_string(spec.created_ms),
      quota.needs_approval ? "1" : "0",
      std::to_string(quota.approval_deadline_ms),
      PlacementToken(spec.language, spec.isolation),
      std::string(NormalizeIsolation(spec.isolation)),
      spec.callback_url.empty() ? "" : "1"};
  const size_t deadline_at = AppendContext(&args, workers, now_ms);
  bool unanswered = false;
  auto reply = EvalFenced(scripts::Submit(), &args, deadline_at, &unanswered);
  if (!reply.ok() && unanswered) {
    SubmitOutcome out;
    out.kind = SubmitOutcome::Kind::kUnconfirmed;
    out.error = reply.status().message();
    return out;
  }
  if (!reply.ok()) return reply.status().WithContext("storing job " + spec.id);
  const RedisReply& r = *reply;
  if (r.type != RedisReply::Type::kArray || r.elements.empty()) return Malformed("submit");
  const auto& e = r.elements;
  const std::string& kind = e[0].str;
  SubmitOutcome out;
  if (kind == "replay" && e.size() == 2) {
    out.kind = SubmitOutcome::Kind::kReplay;
    out.replay_id = e[1].str;
  } else if (kind == "held" && e.size() == 2) {
    out.kind = SubmitOutcome::Kind::kHeld;
    out.session_epoch = Epoch(e[1]);
  } else if (kind == "error" && e.size() == 3) {
    return Status(CodeFromName(e[1].str), e[2].str);
  } else if (kind == "dispatched" && e.size() == 3) {
    out.kind = SubmitOutcome::Kind::kStarted;
    out.worker = e[1].str;
    out.session_epoch = Epoch(e[2]);
  } else if (kind == "queued" && e.size() == 4) {
    out.kind = SubmitOutcome::Kind::kQueued;
    out.position = static_cast<uint64_t>(e[1].integer);
    out.wait_reason = e[2].str;
    out.session_epoch = Epoch(e[3]);
  } else {
    return Malformed("submit");
  }
  return out;
}

std::vector<std::string> ScheduleStore::FinishArgs(const FinishItem& item) const {
  const JobRecord& terminal = *item.record;
  std::string new_epoch;
  if (item.session_reset && terminal.session_epoch && terminal.session_incarnation != 0) {
    new_epoch = SessionEpoch{terminal.session_incarnation, *terminal.session_epoch}.ToString();
  }
  return {terminal.id, JobStatusName(terminal.status),
          item.record_json ? *item.record_json : common::DumpJson(terminal.ToJson()),
          std::to_string(settings_.job_ttl_s),
          item.expect == FinishExpect::kQueued             ? "queued"
          : item.expect == FinishExpect::kAwaitingApproval ? "awaiting_approval"
                                                           : "any",
          std::to_string(settings_.session_ttl_ms), new_epoch,
          UtcDateOf(UtcDayOf(terminal.finished_ms > 0 ? terminal.finished_ms : common::NowMs())),
          // The worker's figure (finite, >= 0: the codec checks) within what
          // a uint64 holds, whatever a hostile worker says.
          std::to_string(std::llround(std::clamp(terminal.cpu_ms.value_or(0), 0.0, 1e12) * 1000)),
          std::to_string(terminal.stdout_data.size() + terminal.stderr_data.size()),
          std::to_string(kUsageDaysKept * 86400)};
}

common::StatusOr<FinishOutcome> ScheduleStore::ParseFinish(const RedisReply& r, int64_t now_ms) {
  if (r.type != RedisReply::Type::kArray || r.elements.size() != 4) return Malformed("finish");
  FinishOutcome out;
  const std::string& kind = r.elements[0].str;
  if (kind == "stored") {
    out.kind = FinishOutcome::Kind::kStored;
  } else if (kind == "ended") {
    out.kind = FinishOutcome::Kind::kEnded;
  } else if (kind == "missing") {
    out.kind = FinishOutcome::Kind::kMissing;
  } else if (kind == "state") {
    out.kind = FinishOutcome::Kind::kNotQueued;
  } else {
    return Malformed("finish");
  }
  out.status = r.elements[2].str;
  out.approval = r.elements[3].str;
  ASSIGN_OR_RETURN(out.started, ParseStarted(r.elements[1], "finish", now_ms));
  return out;
}

common::StatusOr<FinishOutcome> ScheduleStore::Finish(const JobRecord& terminal,
                                                      FinishExpect expect,
                                                      const std::vector<WorkerSlots>& workers,
                                                      int64_t now_ms, bool session_reset) {
  std::vector<std::string> args = FinishArgs({&terminal, expect, session_reset});
  const size_t deadline_at = AppendContext(&args, workers, now_ms);
  auto reply = EvalFenced(scripts::Finish(), &args, deadline_at);
  if (!reply.ok()) return reply.status().WithContext("storing the end of " + terminal.id);
  return ParseFinish(*reply, now_ms);
}

common::StatusOr<std::vector<common::StatusOr<FinishOutcome>>> ScheduleStore::FinishAll(
    const std::vector<FinishItem>& items, const std::vector<WorkerSlots>& workers, int64_t now_ms) {
  std::vector<std::vector<std::string>> args_list;
  args_list.reserve(items.size());
  size_t deadline_at = 0;
  for (const auto& item : items) {
    args_list.push_back(FinishArgs(item));
    deadline_at = AppendContext(&args_list.back(), workers, now_ms);
  }
  auto conn = pool_->Acquire();
  // From now: waiting for a pooled connection is not Redis's delay.
  const std::string deadline = std::to_string(common::NowMs() + kFenceMs);
  for (auto& args : args_list) args[deadline_at] = deadline;
  ASSIGN_OR_RETURN(auto replies, conn->EvalMany(scripts::Finish(), args_list));
  std::vector<common::StatusOr<FinishOutcome>> out;
  out.reserve(replies.size());
  for (size_t i = 0; i < replies.size(); ++i) {
    if (!replies[i].ok()) {
      out.push_back(replies[i].status().WithContext("storing the end of " + items[i].record->id));
    } else {
      out.push_back(ParseFinish(*replies[i], now_ms));
    }
  }
  return out;
}

common::StatusOr<std::vector<StartedJob>> ScheduleStore::Requeue(
    const std::string& job_id, const std::vector<WorkerSlots>& workers, int64_t now_ms) {
  std::vector<std::string> args = {job_id};
  const size_t deadline_at = AppendContext(&args, workers, now_ms);
  auto reply = EvalFenced(scripts::Requeue(), &args, deadline_at);
  if (!reply.ok()) return reply.status().WithContext("requeueing " + job_id);
  const RedisReply& r = *reply;
  return ParseStarted(r, "requeue", now_ms);
}

common::StatusOr<ApproveOutcome> ScheduleStore::Approve(const std::string& job_id,
                                                        bool trust_session,
                                                        const std::string& approver,
                                                        const std::vector<WorkerSlots>& workers,
                                                        int64_t now_ms) {
  std::vector<std::string> args = {job_id, trust_session ? "1" : "0", approver};
  const size_t deadline_at = AppendContext(&args, workers, now_ms);
  auto reply = EvalFenced(scripts::Approve(), &args, deadline_at);
  if (!reply.ok()) return reply.status().WithContext("approving " + job_id);
  const auto& e = reply->elements;
  if (e.empty()) return Malformed("approve");
  ApproveOutcome out;
  const std::string& kind = e[0].str;
  if (kind == "missing") {
    out.kind = ApproveOutcome::Kind::kMissing;
  } else if (kind == "state" && e.size() == 2) {
    out.kind = ApproveOutcome::Kind::kNotAwaiting;
    out.status = e[1].str;
  } else if (kind == "error") {
    out.kind = ApproveOutcome::Kind::kSessionGone;
  } else if (kind == "dispatched" && e.size() == 4) {
    out.kind = ApproveOutcome::Kind::kStarted;
    out.started = StartedJob{job_id, e[1].str, e[3].str, Epoch(e[2]), now_ms};
  } else if (kind == "queued") {
    out.kind = ApproveOutcome::Kind::kQueued;
  } else {
    return Malformed("approve");
  }
  return out;
}

common::StatusOr<std::vector<std::pair<std::string, int64_t>>> ScheduleStore::PendingApprovals(
    size_t limit) {
  auto conn = pool_->Acquire();
  auto r =
      conn->Command({"ZRANGE", keys::kApprovals, "0", std::to_string(limit - 1), "WITHSCORES"});
  if (!r.ok()) return r.status().WithContext("listing approvals");
  std::vector<std::pair<std::string, int64_t>> out;
  for (size_t i = 0; i + 1 < r->elements.size(); i += 2) {
    out.emplace_back(r->elements[i].str, std::strtoll(r->elements[i + 1].str.c_str(), nullptr, 10));
  }
  return out;
}

common::StatusOr<std::vector<StartedJob>> ScheduleStore::Pump(
    const std::vector<WorkerSlots>& workers, int64_t now_ms) {
  std::vector<std::string> args;
  const size_t deadline_at = AppendContext(&args, workers, now_ms);
  auto reply = EvalFenced(scripts::Pump(), &args, deadline_at);
  if (!reply.ok()) return reply.status().WithContext("starting queued jobs");
  const RedisReply& r = *reply;
  return ParseStarted(r, "pump", now_ms);
}

common::StatusOr<TickOutcome> ScheduleStore::Tick(const std::vector<InFlightRef>& in_flight,
                                                  int64_t now_ms, int64_t broker_dead_after_ms,
                                                  const std::vector<std::string>& workers,
                                                  int64_t stray_before_ms) {
  std::vector<std::string> args = {
      settings_.broker_id, std::to_string(now_ms), std::to_string(settings_.lease_ms),
      std::to_string(broker_dead_after_ms), std::to_string(in_flight.size())};
  for (const auto& f : in_flight) {
    args.push_back(f.id);
    args.push_back(f.tenant);
    args.push_back(f.worker);
  }
  args.push_back(std::to_string(workers.size()));
  for (const auto& w : workers) args.push_back(w);
  args.push_back(std::to_string(stray_before_ms));
  auto conn = pool_->Acquire();
  auto reply = conn->Eval(scripts::Tick(), args);
  if (!reply.ok()) return reply.status().WithContext("renewing leases");
  const RedisReply& r = *reply;
  if (r.type != RedisReply::Type::kArray || r.elements.size() != 9) return Malformed("tick");
  TickOutcome out;
  for (const auto& id : r.elements[0].elements) out.not_owned.push_back(id.str);
  out.global_leases = static_cast<uint64_t>(r.elements[1].integer);
  out.brokers_live = static_cast<uint64_t>(r.elements[2].integer);
  const auto& stats = r.elements[3].elements;
  for (size_t i = 0; i + 2 < stats.size(); i += 3) {
    out.tenants.push_back({stats[i].str, static_cast<uint64_t>(stats[i + 1].integer),
                           static_cast<uint64_t>(stats[i + 2].integer)});
  }
  out.sessions = static_cast<uint64_t>(r.elements[4].integer);
  out.approvals_pending = static_cast<uint64_t>(r.elements[5].integer);
  for (const auto& id : r.elements[6].elements) out.approvals_expired.push_back(id.str);
  const auto& closed = r.elements[7].elements;
  for (size_t i = 0; i + 1 < closed.size(); i += 2) {
    out.sessions_expired.emplace_back(closed[i].str, closed[i + 1].str);
  }
  for (const auto& id : r.elements[8].elements) out.strays.push_back(id.str);
  return out;
}

common::StatusOr<std::vector<std::pair<std::string, std::string>>> ScheduleStore::Claim(
    int64_t dead_before_ms, bool include_self) {
  auto conn = pool_->Acquire();
  auto reply = conn->Eval(scripts::Claim(), {settings_.broker_id, std::to_string(dead_before_ms),
                                             include_self ? "1" : "0"});
  if (!reply.ok()) return reply.status().WithContext("taking over dead brokers' jobs");
  const RedisReply& r = *reply;
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t i = 0; i + 1 < r.elements.size(); i += 2) {
    out.emplace_back(r.elements[i].str, r.elements[i + 1].str);
  }
  return out;
}

common::StatusOr<uint64_t> ScheduleStore::NewSessionEpoch() {
  auto conn = pool_->Acquire();
  auto r = conn->Command({"INCR", keys::kSessionEpochs});
  if (!r.ok()) return r.status().WithContext("allocating a session epoch");
  return static_cast<uint64_t>(r->integer);
}

Status ScheduleStore::PublishCancel(const std::string& job_id) {
  auto conn = pool_->Acquire();
  auto r = conn->Command({"PUBLISH", kEventsChannel, "cancel " + job_id});
  return r.ok() ? Status::Ok() : r.status().WithContext("cancelling " + job_id);
}

}  // namespace kiln::broker
