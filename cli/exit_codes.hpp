// The kiln CLI's exit status: what a script sees when `kiln run` returns.
//
//   StatusOr<json> record = client.Submit(body, options);
//   return record.ok() ? ExitCodeForRecord(*record) : ReportError(record.status());
//
// `kiln run` exits with the job's own outcome, mapped as below (the same table
// is in docs/cli.md). Other subcommands exit 0 on success and use the error
// rows for their failures. Values follow sysexits.h and the shell's timeout(1)
// conventions. Pure functions; any thread.
//
//   job / request outcome                                      exit status
//   ---------------------------------------------------------  -----------
//   succeeded                                                  0
//   failed with exit code N (1..255)                           N
//   failed by signal S (no exit code)                          128 + S
//   failed with neither (e.g. uncaught exception, no code)     1
//   timed_out                                                  124
//   memory_exceeded                                            125
//   cancelled                                                  130
//   rejected (SECURITY_BLOCKED, APPROVAL_DENIED, ...)          77
//   rejected because the cluster could not take it
//     (QUEUE_FULL, UNAVAILABLE, RUNTIME_UNAVAILABLE, ...)      69
//   error (WORKER_LOST, SESSION_LOST, ...), network failure,
//     broker 5xx, QUEUE_FULL (429)                             69
//   still queued / running when the broker answered           75
//   usage error, or the API said INVALID_REQUEST,
//     LIMIT_EXCEEDED, UNAUTHORIZED, FORBIDDEN, NOT_FOUND, ...  64
//   a collected file could not be written (--output-dir)       74
#pragma once

#include <nlohmann/json.hpp>

#include "common/status.hpp"

namespace kiln::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;        // failed without an exit code or signal
inline constexpr int kExitUsage = 64;        // EX_USAGE: bad flags or a 4xx request error
inline constexpr int kExitUnavailable = 69;  // EX_UNAVAILABLE: infrastructure, network, 5xx
inline constexpr int kExitIoError = 74;      // EX_IOERR: writing collected files failed
inline constexpr int kExitPending = 75;      // EX_TEMPFAIL: job not finished yet
inline constexpr int kExitRejected = 77;     // EX_NOPERM: refused by policy or approval
inline constexpr int kExitTimedOut = 124;    // as timeout(1)
inline constexpr int kExitMemoryExceeded = 125;
inline constexpr int kExitSignalBase = 128;  // 128 + signal, as a shell reports it
inline constexpr int kExitCancelled = 130;   // as for SIGINT

// The exit status for an execution record (the API's JSON), per the table above.
int ExitCodeForRecord(const nlohmann::json& record);

// The exit status for a request that failed before producing a record: an API
// error answer, a network failure or a local usage error.
int ExitCodeForStatus(const common::Status& status);

// Whether an API error code names infrastructure trouble rather than a refusal.
bool IsInfrastructureCode(common::Code code);

}  // namespace kiln::cli
