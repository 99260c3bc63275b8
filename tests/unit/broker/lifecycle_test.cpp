// The job lifecycle: every state × event pair against one table, then what
// the records of the transitions hold.
#include "broker/job/lifecycle.hpp"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace kiln::broker {
namespace {

namespace protocol = common::protocol;
using A = JobAction;
using S = JobStatus;
using E = JobEvent;

constexpr S kStates[] = {
    S::kQueued,   S::kAwaitingApproval, S::kRunning,   S::kSucceeded, S::kFailed,
    S::kTimedOut, S::kMemoryExceeded,   S::kCancelled, S::kRejected,  S::kError};
constexpr E kEvents[] = {E::kSubmit,          E::kRefuse,         E::kApprove,     E::kDeny,
                         E::kApprovalExpired, E::kStart,          E::kResult,      E::kRefused,
                         E::kCancel,          E::kSessionDeleted, E::kSessionLost, E::kWorkerLost,
                         E::kOverdue};
static_assert(std::size(kEvents) == kJobEventCount);

uint32_t Flags(std::initializer_list<A> actions) {
  uint32_t f = 0;
  for (A a : actions) f |= static_cast<uint32_t>(a);
  return f;
}

// What a state does with an event.
struct Expect {
  enum Kind { kMoves, kNoop, kInvalid, kInternal } kind;
  S next = S::kQueued;
  uint32_t actions = 0;
  std::string code;  // the record's error code after a move ("" for none)
};
Expect Moves(S next, std::initializer_list<A> actions, std::string code = "") {
  return {Expect::kMoves, next, Flags(actions), std::move(code)};
}
const Expect kNoop{Expect::kNoop};
const Expect kInvalid{Expect::kInvalid};
const Expect kInternal{Expect::kInternal};

bool Terminal(S s) { return IsTerminal(s); }

// The whole table. Terminal states are filled in below (everything a no-op
// but Approve/Deny, which tell the admin, and Start, a scheduler bug).
std::map<std::pair<S, E>, Expect> Table() {
  std::map<std::pair<S, E>, Expect> t = {
      {{S::kQueued, E::kApprove}, kInvalid},
      {{S::kQueued, E::kDeny}, kInvalid},
      {{S::kQueued, E::kApprovalExpired}, kNoop},
      {{S::kQueued, E::kStart}, Moves(S::kRunning, {A::kSendToWorker})},
      {{S::kQueued, E::kResult}, kInternal},
      {{S::kQueued, E::kRefused}, kInternal},
      {{S::kQueued, E::kCancel}, Moves(S::kCancelled, {A::kStoreEnd, A::kTellWorker}, "CANCELLED")},
      {{S::kQueued, E::kSessionDeleted},
       Moves(S::kCancelled, {A::kStoreEnd, A::kTellWorker}, "CANCELLED")},
      {{S::kQueued, E::kSessionLost}, Moves(S::kError, {A::kStoreEnd}, "SESSION_LOST")},
      {{S::kQueued, E::kWorkerLost}, kInternal},
      {{S::kQueued, E::kOverdue}, kInternal},

      {{S::kAwaitingApproval, E::kApprove}, Moves(S::kQueued, {A::kSchedule})},
      {{S::kAwaitingApproval, E::kDeny}, Moves(S::kRejected, {A::kStoreEnd}, "APPROVAL_DENIED")},
      {{S::kAwaitingApproval, E::kApprovalExpired},
       Moves(S::kRejected, {A::kStoreEnd}, "APPROVAL_EXPIRED")},
      {{S::kAwaitingApproval, E::kStart}, kInternal},
      {{S::kAwaitingApproval, E::kResult}, kInternal},
      {{S::kAwaitingApproval, E::kRefused}, kInternal},
      {{S::kAwaitingApproval, E::kCancel},
       Moves(S::kCancelled, {A::kStoreEnd, A::kTellWorker}, "CANCELLED")},
      {{S::kAwaitingApproval, E::kSessionDeleted},
       Moves(S::kCancelled, {A::kStoreEnd, A::kTellWorker}, "CANCELLED")},
      {{S::kAwaitingApproval, E::kSessionLost}, Moves(S::kError, {A::kStoreEnd}, "SESSION_LOST")},
      {{S::kAwaitingApproval, E::kWorkerLost}, kInternal},
      {{S::kAwaitingApproval, E::kOverdue}, kInternal},

      {{S::kRunning, E::kApprove}, kInvalid},
      {{S::kRunning, E::kDeny}, kInvalid},
      {{S::kRunning, E::kApprovalExpired}, kNoop},
      {{S::kRunning, E::kStart}, kInternal},
      {{S::kRunning, E::kResult}, Moves(S::kSucceeded, {A::kStoreEnd})},
      {{S::kRunning, E::kRefused}, Moves(S::kQueued, {A::kSchedule})},
      {{S::kRunning, E::kCancel}, Moves(S::kRunning, {A::kTellWorker})},
      {{S::kRunning, E::kSessionDeleted}, Moves(S::kRunning, {A::kTellWorker})},
      {{S::kRunning, E::kSessionLost}, kInternal},
      {{S::kRunning, E::kWorkerLost}, Moves(S::kError, {A::kStoreEnd}, "WORKER_LOST")},
      {{S::kRunning, E::kOverdue}, Moves(S::kError, {A::kStoreEnd, A::kTellWorker}, "INTERNAL")},
  };
  for (S s : kStates) {
    // Submit and Refuse begin a job (Begin); no record takes them.
    t[{s, E::kSubmit}] = kInternal;
    t[{s, E::kRefuse}] = kInternal;
    if (!Terminal(s)) continue;
    for (E e : kEvents) {
      if (e == E::kSubmit || e == E::kRefuse) continue;
      t[{s, e}] = e == E::kApprove || e == E::kDeny ? kInvalid : e == E::kStart ? kInternal : kNoop;
    }
  }
  return t;
}

JobRecord RecordIn(S state) {
  JobRecord r;
  r.id = "ex_1";
  r.tenant = "acme";
  r.language = "python";
  r.session_id = "s1";
  r.created_ms = 1000;
  r.status = state;
  r.queue_position = 3;
  r.wait_reason = state == S::kQueued ? "session" : "";
  if (state == S::kRunning) {
    r.worker = "w1";
    r.started_ms = 1500;
  }
  return r;
}

TEST(JobLifecycle, EveryStateAndEventFollowsTheTable) {
  const auto table = Table();
  protocol::Result ok;
  ok.reason = protocol::EndReason::kExit;
  ok.exit_code = 0;
  ok.stdout_data = "1\n";
  int checked = 0;
  for (S s : kStates) {
    for (E e : kEvents) {
      SCOPED_TRACE(std::string(JobStatusName(s)) + " × " + JobEventName(e));
      auto it = table.find({s, e});
      ASSERT_NE(it, table.end()) << "the table has no entry";
      const Expect& want = it->second;
      const JobRecord before = RecordIn(s);
      JobInput in{.event = e, .now_ms = 2000, .detail = "why", .worker = "w2", .result = &ok};
      auto t = JobLifecycle::Apply(before, in);
      ++checked;
      switch (want.kind) {
        case Expect::kInvalid:
          ASSERT_FALSE(t.ok());
          EXPECT_EQ(t.status().code(), common::Code::kInvalidRequest);
          EXPECT_NE(t.status().message().find(JobStatusName(s)), std::string::npos)
              << t.status().message();
          continue;
        case Expect::kInternal:
          ASSERT_FALSE(t.ok());
          EXPECT_EQ(t.status().code(), common::Code::kInternal);
          continue;
        case Expect::kNoop:
          ASSERT_TRUE(t.ok()) << t.status().ToString();
          EXPECT_TRUE(t->None());
          EXPECT_EQ(t->record.ToJson(), before.ToJson()) << "a no-op changed the record";
          continue;
        case Expect::kMoves:
          break;
      }
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      EXPECT_EQ(t->from, s);
      EXPECT_EQ(t->record.status, want.next) << JobStatusName(t->record.status);
      EXPECT_EQ(t->actions, want.actions);
      EXPECT_EQ(t->record.id, before.id);
      EXPECT_EQ(t->record.tenant, before.tenant);
      if (IsTerminal(want.next)) {
        // Every terminal record says when it ended and is no longer waiting.
        EXPECT_EQ(t->record.finished_ms, 2000);
        EXPECT_FALSE(t->record.queue_position.has_value());
        EXPECT_EQ(t->record.wait_reason, "");
        EXPECT_TRUE(t->Has(A::kStoreEnd));
      }
      if (want.code.empty()) {
        EXPECT_FALSE(t->record.error.has_value());
      } else {
        ASSERT_TRUE(t->record.error.has_value());
        EXPECT_EQ(t->record.error->code, want.code);
        EXPECT_EQ(t->record.error->retryable,
                  want.code == "WORKER_LOST" || want.code == "INTERNAL");
      }
    }
  }
  EXPECT_EQ(checked, static_cast<int>(std::size(kStates) * std::size(kEvents)));
}

TEST(JobLifecycle, BeginAdmitsOrRefuses) {
  JobSpec spec;
  spec.id = "ex_9";
  spec.tenant = "acme";
  spec.language = "shell";
  spec.created_ms = 10;
  spec.warnings = {"w"};
  auto queued = JobLifecycle::Begin(spec, {.event = E::kSubmit, .now_ms = 11});
  ASSERT_TRUE(queued.ok());
  EXPECT_EQ(queued->record.status, S::kQueued);
  EXPECT_EQ(queued->actions, Flags({A::kSchedule}));
  EXPECT_EQ(queued->record.warnings, spec.warnings);

  auto refused = JobLifecycle::Begin(spec, {.event = E::kRefuse,
                                            .now_ms = 12,
                                            .code = common::Code::kSecurityBlocked,
                                            .detail = "rule x"});
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(refused->record.status, S::kRejected);
  EXPECT_EQ(refused->actions, Flags({A::kStoreEnd}));
  ASSERT_TRUE(refused->record.error.has_value());
  EXPECT_EQ(refused->record.error->code, "SECURITY_BLOCKED");
  EXPECT_EQ(refused->record.error->message, "rule x");
  EXPECT_EQ(refused->record.finished_ms, 12);

  for (E e : kEvents) {
    if (e == E::kSubmit || e == E::kRefuse) continue;
    EXPECT_FALSE(JobLifecycle::Begin(spec, {.event = e}).ok()) << JobEventName(e);
  }
}

TEST(JobLifecycle, StartNamesTheWorkerAndTheWait) {
  auto t = JobLifecycle::Apply(
      RecordIn(S::kQueued),
      {.event = E::kStart, .now_ms = 1750, .worker = "w7", .session_epoch = SessionEpoch{40, 4}});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->record.worker, "w7");
  EXPECT_EQ(t->record.session_epoch, 4u) << "records show the generation";
  EXPECT_EQ(t->record.session_incarnation, 40u);
  EXPECT_EQ(t->record.ToJson().dump().find("40"), std::string::npos)
      << "the incarnation is the worker's name for it, not the client's";
  EXPECT_EQ(t->record.started_ms, 1750);
  EXPECT_EQ(t->record.queued_ms, 750.0);
  EXPECT_FALSE(t->record.queue_position.has_value());
  EXPECT_EQ(t->record.wait_reason, "");
}

TEST(JobLifecycle, MessagesSayWhatHappened) {
  auto denied = JobLifecycle::Apply(RecordIn(S::kAwaitingApproval),
                                    {.event = E::kDeny, .now_ms = 1, .detail = "admin:2"});
  ASSERT_TRUE(denied.ok());
  EXPECT_EQ(denied->record.error->message, "denied by admin:2");

  auto lost = JobLifecycle::Apply(RecordIn(S::kRunning),
                                  {.event = E::kWorkerLost, .now_ms = 1, .detail = "w1 died"});
  ASSERT_TRUE(lost.ok());
  EXPECT_EQ(lost->record.error->message, "w1 died; the job may have partly run and is not retried");
  EXPECT_EQ(lost->record.worker, "w1") << "the record still names the worker that ran it";

  auto session = JobLifecycle::Apply(RecordIn(S::kQueued), {.event = E::kSessionLost,
                                                            .now_ms = 1,
                                                            .detail = "gone",
                                                            .worker = "w3",
                                                            .session_epoch = SessionEpoch{90, 9}});
  ASSERT_TRUE(session.ok());
  EXPECT_EQ(session->record.error->message, "gone");
  EXPECT_EQ(session->record.worker, "w3");
  EXPECT_EQ(session->record.session_epoch, 9u);
  EXPECT_EQ(session->record.session_incarnation, 90u);

  auto cancelled = JobLifecycle::Apply(RecordIn(S::kQueued), {.event = E::kCancel, .now_ms = 1});
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->record.error->message, "cancelled before it started");
  EXPECT_FALSE(cancelled->record.error->retryable);
}

// A Result's outcome: the worker's reason and exit decide the status.
TEST(JobLifecycle, ResultsEndRunningJobsByTheirReason) {
  struct Case {
    protocol::EndReason reason;
    std::optional<int32_t> exit_code;
    bool error;
    S status;
    std::string code;
  };
  const std::vector<Case> cases = {
      {protocol::EndReason::kExit, 0, false, S::kSucceeded, ""},
      {protocol::EndReason::kExit, 0, true, S::kFailed, "EXECUTION_FAILED"},  // unencodable result
      {protocol::EndReason::kExit, 3, false, S::kFailed, "EXECUTION_FAILED"},
      {protocol::EndReason::kTimeout, std::nullopt, false, S::kTimedOut, "TIMEOUT"},
      {protocol::EndReason::kMemoryExceeded, std::nullopt, false, S::kMemoryExceeded,
       "MEMORY_EXCEEDED"},
      {protocol::EndReason::kCancelled, std::nullopt, false, S::kCancelled, "CANCELLED"},
      {protocol::EndReason::kOutputLimit, std::nullopt, false, S::kFailed, "OUTPUT_LIMIT"},
      {protocol::EndReason::kSandboxViolation, std::nullopt, false, S::kFailed, "SECURITY_BLOCKED"},
      {protocol::EndReason::kNetworkLimit, std::nullopt, false, S::kFailed, "NETWORK_LIMIT"},
      {protocol::EndReason::kError, std::nullopt, false, S::kError, "INTERNAL"},
  };
  for (const auto& c : cases) {
    protocol::Result res;
    res.reason = c.reason;
    res.exit_code = c.exit_code;
    res.stdout_data = "o";
    if (c.error) res.error = protocol::ErrorInfo{"ResultNotSerializable", "no", ""};
    auto t = JobLifecycle::Apply(RecordIn(S::kRunning),
                                 {.event = E::kResult, .now_ms = 9, .result = &res});
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->record.status, c.status) << protocol::EndReasonName(c.reason);
    EXPECT_EQ(t->record.stdout_data, "o");
    EXPECT_EQ(t->record.end_reason, protocol::EndReasonName(c.reason));
    if (c.code.empty()) {
      EXPECT_FALSE(t->record.error.has_value());
    } else {
      ASSERT_TRUE(t->record.error.has_value());
      EXPECT_EQ(t->record.error->code, c.code);
    }
  }
  // A Result without its payload is a caller's mistake, not an outcome.
  EXPECT_FALSE(JobLifecycle::Apply(RecordIn(S::kRunning), {.event = E::kResult}).ok());
}

// The gateway's account reaches the record only when it reads as one; the
// cap's message only when it reads as the gateway's; a worker that cannot
// give network says so with NETWORK_NOT_ALLOWED.
TEST(JobLifecycle, NetworkUsageAndLimitsFromAWorkerAreChecked) {
  protocol::Result res;
  res.reason = protocol::EndReason::kNetworkLimit;
  res.worker_error = "bytes: the job moved more than 4096 bytes through the network (its cap)";
  res.network_json =
      R"({"connections": 1, "refused": 0, "bytes_in": 5000, "bytes_out": 10, "destinations": )"
      R"([{"host": "api.example.test", "port": 80, "allowed": true, "count": 1}], "limit": "bytes"})";
  auto t = JobLifecycle::Apply(RecordIn(S::kRunning),
                               {.event = E::kResult, .now_ms = 9, .result = &res});
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(t->record.network.has_value());
  EXPECT_EQ(t->record.network->bytes_in, 5000u);
  EXPECT_EQ(t->record.network->limit, "bytes");
  EXPECT_EQ(t->record.error->message,
            "execution exceeded its network limit (bytes: the job moved more than 4096 bytes "
            "through the network (its cap))");
  EXPECT_EQ(t->record.ToJson()["network"]["destinations"][0]["host"], "api.example.test");

  res.worker_error = "<script>anything a hostile worker says";
  res.network_json = R"({"destinations": [{"host": "a b", "port": 1, "allowed": true}]})";
  t = JobLifecycle::Apply(RecordIn(S::kRunning),
                          {.event = E::kResult, .now_ms = 9, .result = &res});
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->record.network.has_value());
  EXPECT_FALSE(t->record.ToJson().contains("network"));
  EXPECT_EQ(t->record.error->message, "execution exceeded its network limit");

  res.reason = protocol::EndReason::kError;
  res.worker_error = "network: network on request needs the net_ns layer";
  res.worker_error_code = "NETWORK_NOT_ALLOWED";
  t = JobLifecycle::Apply(RecordIn(S::kRunning),
                          {.event = E::kResult, .now_ms = 9, .result = &res});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->record.status, S::kError);
  EXPECT_EQ(t->record.error->code, "NETWORK_NOT_ALLOWED");
}

}  // namespace
}  // namespace kiln::broker
