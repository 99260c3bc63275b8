#include "broker/http/quota_counter.hpp"

namespace kiln::broker {

QuotaCounter::Hold QuotaCounter::TryAcquire(const std::string& tenant, size_t limit) {
  std::lock_guard lock(mu_);
  size_t& n = counts_[tenant];
  if (n >= limit) {
    if (n == 0) counts_.erase(tenant);
    return {};
  }
  ++n;
  ++total_;
  return Hold(this, tenant);
}

void QuotaCounter::Release(const std::string& tenant) {
  std::lock_guard lock(mu_);
  auto it = counts_.find(tenant);
  if (it == counts_.end()) return;
  --total_;
  if (--it->second == 0) counts_.erase(it);
}

size_t QuotaCounter::count(const std::string& tenant) const {
  std::lock_guard lock(mu_);
  auto it = counts_.find(tenant);
  return it == counts_.end() ? 0 : it->second;
}

size_t QuotaCounter::total() const {
  std::lock_guard lock(mu_);
  return total_;
}

}  // namespace kiln::broker
