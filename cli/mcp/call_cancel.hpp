// CallCancels: MCP cancellation (notifications/cancelled) of tools/call
// requests still in progress. An execute_code call submits with `wait: true`
// and an Idempotency-Key of its own; to cancel it, the same submit is sent
// again with `wait: false` — the broker answers with the same job's id, never
// a second run — and that job is cancelled. The waiting call then returns,
// and, as the spec asks, no response is sent for a cancelled request.
//
//   auto ticket = cancels.Open(request_id);        // the caller thread, before the call
//   if (!ticket->Arm(body, key)) return;           // execute_code, before it submits
//   cancels.Cancel(request_id, backend);           // the reader thread, on the notification
//   cancels.Close(request_id);  if (ticket->cancelled()) /* send nothing */;
//
// Thread-safe: the stdio loop reads notifications on one thread while calls
// run on others.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli/mcp/backend.hpp"

namespace kiln::cli::mcp {

// One tools/call in progress.
class CancelTicket {
 public:
  // Records the submit the call is about to make; false when the call was
  // cancelled already (then it must not submit at all).
  bool Arm(nlohmann::json body, std::string idempotency_key);
  bool cancelled() const;

 private:
  friend class CallCancels;
  struct Submitted {
    nlohmann::json body;
    std::string idempotency_key;
  };
  // Marks the call cancelled; the submit to undo, if one was made.
  std::optional<Submitted> Cancel();

  mutable std::mutex mu_;
  bool cancelled_ = false;
  std::optional<Submitted> submitted_;
};

class CallCancels {
 public:
  // A fresh idempotency key for one execute_code call ("mcp-" + 32 hex digits).
  static std::string NewKey();

  std::shared_ptr<CancelTicket> Open(const nlohmann::json& request_id);
  void Close(const nlohmann::json& request_id);
  // Cancels the call `request_id` (a string or number, as the client sent it)
  // and its execution through `backend`. Unknown or finished requests are
  // ignored, as the spec allows.
  void Cancel(const nlohmann::json& request_id, Backend* backend);

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<CancelTicket>> open_;  // by request id as JSON text
};

}  // namespace kiln::cli::mcp
