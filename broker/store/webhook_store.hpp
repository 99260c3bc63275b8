// WebhookStore: the durable outbox of webhook deliveries in Redis (docs/api.md,
// "Webhooks"). The finish script (and JobStore::CreateEnded) enters a job
// whose submission named a callback_url when it ends; any broker's
// WebhookSender claims due deliveries, and each ends delivered, retried
// later or given up. A claim leases the delivery for `lease_ms`: a broker
// that dies while delivering leaves it to the next claim after the lease,
// so a restart loses no delivery (at least once; receivers dedupe by
// Kiln-Webhook-Id).
//
//   ASSIGN_OR_RETURN(auto due, store.Claim(NowMs(), 30000, 8));
//   store.Delivered(due[0].job_id);  // or Retry(id, at_ms) / GiveUp(id, n, why)
//
// Keys: keys::kWebhooks (job id -> next try, ms), kWebhookAttempts (job id ->
// tries so far), kWebhooksDead (the last 1,000 given up). Each call is one
// round trip. Thread-safe (each call leases its own connection).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "broker/store/redis_connection.hpp"
#include "common/status.hpp"

namespace kiln::broker {

class WebhookStore {
 public:
  explicit WebhookStore(RedisPool* pool) : pool_(pool) {}

  struct Due {
    std::string job_id;
    uint64_t attempt = 0;  // 1 for the first try
  };
  // Up to `max` deliveries due at `now_ms`, each leased until now + lease_ms
  // and its attempt counted.
  common::StatusOr<std::vector<Due>> Claim(int64_t now_ms, int64_t lease_ms, size_t max);
  common::Status Delivered(const std::string& job_id);
  common::Status Retry(const std::string& job_id, int64_t at_ms);
  // Stops trying; the last kDeadKept are listed in kWebhooksDead as
  // "<job id> <attempts> <why>".
  common::Status GiveUp(const std::string& job_id, uint64_t attempts, const std::string& why);
  static constexpr size_t kDeadKept = 1000;

 private:
  RedisPool* pool_;
};

}  // namespace kiln::broker
