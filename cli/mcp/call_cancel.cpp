#include "cli/mcp/call_cancel.hpp"

#include <random>

namespace kiln::cli::mcp {

using nlohmann::json;

bool CancelTicket::Arm(json body, std::string idempotency_key) {
  std::lock_guard lock(mu_);
  if (cancelled_) return false;
  submitted_ = Submitted{std::move(body), std::move(idempotency_key)};
  return true;
}

bool CancelTicket::cancelled() const {
  std::lock_guard lock(mu_);
  return cancelled_;
}

std::optional<CancelTicket::Submitted> CancelTicket::Cancel() {
  std::lock_guard lock(mu_);
  cancelled_ = true;
  return submitted_;
}

std::string CallCancels::NewKey() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string key = "mcp-";
  for (int i = 0; i < 2; ++i) {
    uint64_t v = rng();
    for (int d = 0; d < 16; ++d, v >>= 4) key += kHex[v & 0xf];
  }
  return key;
}

std::shared_ptr<CancelTicket> CallCancels::Open(const json& request_id) {
  auto ticket = std::make_shared<CancelTicket>();
  std::lock_guard lock(mu_);
  open_[request_id.dump()] = ticket;
  return ticket;
}

void CallCancels::Close(const json& request_id) {
  std::lock_guard lock(mu_);
  open_.erase(request_id.dump());
}

void CallCancels::Cancel(const json& request_id, Backend* backend) {
  std::shared_ptr<CancelTicket> ticket;
  {
    std::lock_guard lock(mu_);
    auto it = open_.find(request_id.dump());
    if (it == open_.end()) return;
    ticket = it->second;
  }
  auto submitted = ticket->Cancel();
  if (!submitted) return;  // not submitted yet: Arm() will refuse
  // The same submit without waiting: the broker's idempotency answers with
  // the job the call created (or creates it now, to be cancelled at once).
  json body = submitted->body;
  body["wait"] = false;
  auto job = backend->Submit(body, std::chrono::seconds(30), submitted->idempotency_key);
  if (!job.ok() || !job->contains("id") || !(*job)["id"].is_string()) return;
  (void)backend->Cancel((*job)["id"].get<std::string>());
}

}  // namespace kiln::cli::mcp
