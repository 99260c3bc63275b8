#include "broker/webhook/webhook_sender.hpp"

#include <httplib.h>

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "broker/webhook/callback_url.hpp"
#include "broker/webhook/webhook_signature.hpp"
#include "common/clock.hpp"
#include "common/log/logging.hpp"
#include "common/network_policy.hpp"
#include "common/thread_name.hpp"

namespace kiln::broker {
namespace {

const common::SubsystemLog kLog("jobs");

// How often an idle sender looks for due deliveries, and after a Redis error.
constexpr auto kPoll = std::chrono::milliseconds(250);
constexpr auto kRedisRetry = std::chrono::seconds(1);

// Sleeps `d` unless `stop` comes first; false when it did.
bool Pause(std::stop_token stop, std::chrono::milliseconds d) {
  std::mutex mu;
  std::condition_variable_any cv;
  std::unique_lock lock(mu);
  return !cv.wait_for(lock, stop, d, [] { return false; }) && !stop.stop_requested();
}

}  // namespace

std::chrono::milliseconds WebhookSender::Backoff(uint64_t attempt) {
  const uint64_t shift = attempt == 0 ? 0 : std::min<uint64_t>(attempt - 1, 20);
  const auto d = std::chrono::milliseconds(1000) * (uint64_t{1} << shift);
  return std::min<std::chrono::milliseconds>(d, kMaxBackoff);
}

void WebhookSender::Run(std::stop_token stop) {
  while (!stop.stop_requested()) {
    auto due = outbox_->Claim(common::NowMs(),
                              std::chrono::duration_cast<std::chrono::milliseconds>(kLease).count(),
                              kBatch);
    if (!due.ok()) {
      kLog.Warn({}, "webhooks: cannot claim deliveries: {}", due.status().ToString());
      if (!Pause(stop, kRedisRetry)) return;
      continue;
    }
    if (due->empty()) {
      if (!Pause(stop, kPoll)) return;
      continue;
    }
    // One slow receiver holds its own thread, not the others'.
    std::vector<std::jthread> deliveries;
    for (const auto& d : *due) {
      deliveries.emplace_back([this, d] {
        common::NameThisThread("kiln-webhook-out");
        Deliver(d);
      });
    }
  }
}

void WebhookSender::Failed(const WebhookStore::Due& due, const std::string& tenant,
                           const std::string& why) {
  if (metrics_) metrics_->WebhookDelivery(tenant, "failed");
  if (due.attempt >= kMaxAttempts) {
    kLog.Warn({.job = due.job_id, .tenant = tenant}, "webhook given up after {} attempts: {}",
              due.attempt, why);
    if (metrics_) metrics_->WebhookDelivery(tenant, "given_up");
    (void)outbox_->GiveUp(due.job_id, due.attempt, why);
    return;
  }
  kLog.Info({.job = due.job_id, .tenant = tenant}, "webhook attempt {} failed: {}", due.attempt,
            why);
  (void)outbox_->Retry(due.job_id, common::NowMs() + Backoff(due.attempt).count());
}

void WebhookSender::Deliver(const WebhookStore::Due& due) {
  auto spec = jobs_->LoadSpec(due.job_id);
  if (!spec.ok()) {
    // An expired record has nothing left to deliver; Redis trouble passes.
    if (spec.status().code() == common::Code::kNotFound) {
      (void)outbox_->GiveUp(due.job_id, due.attempt, "the record has expired");
    } else {
      (void)outbox_->Retry(due.job_id, common::NowMs() + Backoff(due.attempt).count());
    }
    return;
  }
  const TenantConfig* tenant = FindTenant(config_, spec->tenant);
  auto url = ParseCallbackUrl(spec->callback_url);
  auto allow =
      tenant
          ? common::ParseDestinations(tenant->webhooks.allow, "allow")
          : common::StatusOr<std::vector<common::Destination>>(common::NotFound("no such tenant"));
  if (!url.ok() || !allow.ok() || tenant->webhooks.secret.empty() ||
      !common::Matches(*allow, url->host, url->port)) {
    if (metrics_) metrics_->WebhookDelivery(spec->tenant, "given_up");
    (void)outbox_->GiveUp(due.job_id, due.attempt,
                          "the tenant's webhooks no longer allow " + spec->callback_url);
    return;
  }
  auto body = jobs_->RecordText(due.job_id);
  if (!body.ok()) {
    (void)outbox_->Retry(due.job_id, common::NowMs() + Backoff(due.attempt).count());
    return;
  }
  const int64_t now_s = common::NowMs() / 1000;
  httplib::Client client(url->Origin());
  const auto timeout = std::chrono::duration_cast<std::chrono::seconds>(kTimeout).count();
  client.set_connection_timeout(timeout, 0);
  client.set_read_timeout(timeout, 0);
  client.set_write_timeout(timeout, 0);
  client.set_follow_location(false);
  const httplib::Headers headers = {
      {"Kiln-Webhook-Id", due.job_id},
      {"Kiln-Webhook-Attempt", std::to_string(due.attempt)},
      {"Kiln-Signature", SignWebhook(tenant->webhooks.secret, now_s, *body)},
      {"User-Agent", "kiln-broker/" KILN_VERSION}};
  auto res = client.Post(url->target, headers, *body, "application/json");
  if (res && res->status >= 200 && res->status < 300) {
    if (metrics_) metrics_->WebhookDelivery(spec->tenant, "delivered");
    (void)outbox_->Delivered(due.job_id);
    return;
  }
  Failed(due, spec->tenant,
         res ? "answered HTTP " + std::to_string(res->status) : httplib::to_string(res.error()));
}

}  // namespace kiln::broker
