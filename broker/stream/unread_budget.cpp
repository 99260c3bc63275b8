#include "broker/stream/unread_budget.hpp"

namespace kiln::broker {
namespace {

// What a Charge points at: gives its bytes back when the last copy goes.
class Held {
 public:
  Held(std::shared_ptr<std::atomic<size_t>> counter, size_t bytes)
      : counter_(std::move(counter)), bytes_(bytes) {}
  Held(const Held&) = delete;
  Held& operator=(const Held&) = delete;
  ~Held() { counter_->fetch_sub(bytes_); }

 private:
  std::shared_ptr<std::atomic<size_t>> counter_;
  size_t bytes_;
};

}  // namespace

std::shared_ptr<UnreadBudget::Counter> UnreadBudget::CounterOf(const std::string& tenant) {
  std::lock_guard lock(mu_);
  auto& c = counters_[tenant];
  if (!c) c = std::make_shared<Counter>(0);
  return c;
}

UnreadBudget::Charge UnreadBudget::Make(std::shared_ptr<Counter> counter, size_t bytes) {
  return std::make_shared<const Held>(std::move(counter), bytes);
}

UnreadBudget::Charge UnreadBudget::TryCharge(const std::string& tenant, size_t bytes,
                                             size_t limit) {
  auto counter = CounterOf(tenant);
  size_t now = counter->load();
  do {
    if (now != 0 && (bytes > limit || now > limit - bytes)) return nullptr;
  } while (!counter->compare_exchange_weak(now, now + bytes));
  return Make(std::move(counter), bytes);
}

UnreadBudget::Charge UnreadBudget::Force(const std::string& tenant, size_t bytes) {
  auto counter = CounterOf(tenant);
  counter->fetch_add(bytes);
  return Make(std::move(counter), bytes);
}

size_t UnreadBudget::held(const std::string& tenant) const {
  std::lock_guard lock(mu_);
  auto it = counters_.find(tenant);
  return it == counters_.end() ? 0 : it->second->load();
}

}  // namespace kiln::broker
