// WebhookSender: delivers ended jobs' records to their callback_url (docs/api.md,
// "Webhooks"). Every broker runs one; they share the outbox in Redis
// (WebhookStore), so a delivery is made by whichever claims it, and one
// that a dying broker held is claimed again after its lease.
//
//   WebhookSender sender(config, &outbox, &jobs, &metrics);
//   std::jthread t([&](std::stop_token st) { sender.Run(st); });
//
// A delivery is a POST of the stored record with Kiln-Webhook-Id,
// Kiln-Webhook-Attempt and Kiln-Signature (webhook_signature.hpp, the
// tenant's webhooks.secret). A 2xx answer ends it; anything else (another
// status, no connection, kTimeout) tries again after 1, 2, 4 ... s (at most
// kMaxBackoff) until kMaxAttempts, then gives up (kWebhooksDead). Redirects
// are not followed, and the URL is checked against the tenant's
// webhooks.allow again before each try (the config may have changed).
// Run() on one thread; it delivers up to kBatch at once, each on a thread of
// its own.
#pragma once

#include <chrono>
#include <cstdint>
#include <stop_token>

#include "broker/config.hpp"
#include "broker/metrics/broker_metrics.hpp"
#include "broker/store/job_store.hpp"
#include "broker/store/webhook_store.hpp"

namespace kiln::broker {

class WebhookSender {
 public:
  static constexpr uint64_t kMaxAttempts = 15;
  static constexpr std::chrono::seconds kMaxBackoff{600};
  static constexpr std::chrono::seconds kTimeout{10};  // connect, and each read or write
  static constexpr std::chrono::seconds kLease{40};    // > a try's longest time
  static constexpr size_t kBatch = 8;

  WebhookSender(const BrokerConfig& config, WebhookStore* outbox, JobStore* jobs,
                BrokerMetrics* metrics)
      : config_(config), outbox_(outbox), jobs_(jobs), metrics_(metrics) {}

  void Run(std::stop_token stop);
  // How long after try `attempt` (1-based) failed the next one comes.
  static std::chrono::milliseconds Backoff(uint64_t attempt);

 private:
  void Deliver(const WebhookStore::Due& due);
  void Failed(const WebhookStore::Due& due, const std::string& tenant, const std::string& why);

  const BrokerConfig& config_;
  WebhookStore* outbox_;
  JobStore* jobs_;
  BrokerMetrics* metrics_;
};

}  // namespace kiln::broker
