// Human-readable renderings of API answers for the kiln CLI.
//
//   std::cout << FormatRecordSummary(record);                 // kiln status
//   std::cout << FormatWorkersTable(body["workers"], NowMs()); // kiln workers
//   std::cout << FormatSessionsTable(body["sessions"], NowMs()); // kiln sessions
//
// Pure functions over the API's JSON (missing or null fields print as "-");
// any thread. `--json` bypasses them and prints the JSON itself.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace kiln::cli {

// "3.1 ms", "2.50 s", "-" for null.
std::string FormatDurationMs(const nlohmann::json& ms);

// "0.4s ago", "12s ago", "5m ago", "2h ago"; "never" when `then_ms` is 0.
std::string FormatAge(int64_t then_ms, int64_t now_ms);

// Several "label:  value" lines: id, status, exit code or signal, duration,
// worker, error (code: message), and queue position / session when set.
std::string FormatRecordSummary(const nlohmann::json& record);

// A table with a header row: ID, RUNTIMES, SLOTS, RUNNING, LAYERS, HEARTBEAT
// (age relative to `now_ms`), or a line saying no worker is connected. LAYERS
// is the number of sandbox layers, or their names when `wide`.
std::string FormatWorkersTable(const nlohmann::json& workers, int64_t now_ms, bool wide = false);

// A table of GET /v1/sessions: ID, LANGUAGE, STATE, WORKER, RUNS, EPOCH,
// LAST USED (age relative to `now_ms`), CONVERSATION; or "no sessions".
std::string FormatSessionsTable(const nlohmann::json& sessions, int64_t now_ms);

// GET /v1/approvals for a reviewer: per job one header line (id, tenant,
// language, session, age, time left) and then its code, each line indented
// with "    | " so nothing in it can pass for a header, and control
// characters and bidirectional overrides shown as escapes (\x1b, \u202e) so
// the code cannot hide what it does from the reviewer's terminal.
std::string FormatApprovals(const nlohmann::json& approvals, int64_t now_ms);

// One line for GET /v1/health: "ok: redis ok, 2 workers, 0 queued".
std::string FormatHealth(const nlohmann::json& health);

}  // namespace kiln::cli
