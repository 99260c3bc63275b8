#include "broker/store/webhook_store.hpp"

#include "broker/store/redis_keys.hpp"
#include "broker/store/webhook_scripts.hpp"

namespace kiln::broker {

common::StatusOr<std::vector<WebhookStore::Due>> WebhookStore::Claim(int64_t now_ms,
                                                                     int64_t lease_ms, size_t max) {
  auto conn = pool_->Acquire();
  ASSIGN_OR_RETURN(RedisReply r, conn->Eval(scripts::ClaimWebhooks(),
                                            {std::to_string(now_ms), std::to_string(lease_ms),
                                             std::to_string(max)}));
  std::vector<Due> out;
  for (size_t i = 0; i + 1 < r.elements.size(); i += 2) {
    out.push_back({r.elements[i].str, static_cast<uint64_t>(r.elements[i + 1].integer)});
  }
  return out;
}

common::Status WebhookStore::Delivered(const std::string& job_id) {
  auto conn = pool_->Acquire();
  return conn
      ->Pipeline({{"MULTI"},
                  {"ZREM", keys::kWebhooks, job_id},
                  {"HDEL", keys::kWebhookAttempts, job_id},
                  {"EXEC"}})
      .status();
}

common::Status WebhookStore::Retry(const std::string& job_id, int64_t at_ms) {
  auto conn = pool_->Acquire();
  return conn->Command({"ZADD", keys::kWebhooks, "XX", std::to_string(at_ms), job_id}).status();
}

common::Status WebhookStore::GiveUp(const std::string& job_id, uint64_t attempts,
                                    const std::string& why) {
  auto conn = pool_->Acquire();
  return conn
      ->Pipeline({{"MULTI"},
                  {"ZREM", keys::kWebhooks, job_id},
                  {"HDEL", keys::kWebhookAttempts, job_id},
                  {"LPUSH", keys::kWebhooksDead,
                   job_id + " " + std::to_string(attempts) + " " + why.substr(0, 200)},
                  {"LTRIM", keys::kWebhooksDead, "0", std::to_string(kDeadKept - 1)},
                  {"EXEC"}})
      .status();
}

}  // namespace kiln::broker
