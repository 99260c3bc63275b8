// UnreadBudget: the bytes of records — GET answers, the end of an event
// stream, a native subscription's result — that each tenant's clients have
// been sent by this broker and have not read yet, against a cap per tenant
// (quotas.tenant_max_unread_bytes, docs/security.md "Hostile clients").
//
// A record carries up to max_output_bytes of output, so these are the large
// answers, and a client that does not read keeps them in the broker: an HTTP
// connection holds its answer until its write timeout, and ZeroMQ bounds a
// pipe by frame count, not size. Without this budget a tenant that subscribes
// many times to a large job, or GETs its record on many connections, and
// reads slowly, could make the broker hold N copies of it at once.
//
//   UnreadBudget::Charge c = budget.TryCharge(tenant, record.ApproxJsonBytes(), limit);
//   if (!c) return RateLimited(...);   // or: try again later (stream ends)
//   // keep `c` alive beside the bytes; drop it once they are written or gone
//
// A tenant that holds nothing is always charged, so one answer larger than
// the cap still goes. Thread-safe; a Charge may be released on any thread
// (ZeroMQ's I/O thread, an HTTP I/O thread) and may outlive the budget.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace kiln::broker {

class UnreadBudget {
 public:
  // Bytes counted against a tenant while it lives; null when refused.
  using Charge = std::shared_ptr<const void>;

  // `bytes` for `tenant`, when it holds less than `limit - bytes` or nothing.
  Charge TryCharge(const std::string& tenant, size_t bytes, size_t limit);
  // `bytes` for `tenant` whatever it holds (an answer that cannot be refused
  // any more, such as a wait's: it is still counted against later ones).
  Charge Force(const std::string& tenant, size_t bytes);
  // What `tenant` holds now.
  size_t held(const std::string& tenant) const;

 private:
  using Counter = std::atomic<size_t>;
  std::shared_ptr<Counter> CounterOf(const std::string& tenant);
  static Charge Make(std::shared_ptr<Counter> counter, size_t bytes);

  mutable std::mutex mu_;
  // One per tenant seen; tenants are configured, so few.
  std::unordered_map<std::string, std::shared_ptr<Counter>> counters_;  // guarded by mu_
};

}  // namespace kiln::broker
