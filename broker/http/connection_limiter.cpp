#include "broker/http/connection_limiter.hpp"

namespace kiln::broker {

ConnectionLimiter::Lane ConnectionLimiter::Admit(const std::string& address) {
  std::lock_guard lock(mu_);
  PerAddress& a = by_address_[address];
  if (normal_ < limits_.max_total && a.normal < limits_.max_per_address) {
    ++normal_;
    ++a.normal;
    return Lane::kNormal;
  }
  if (reserve_ < limits_.reserve_total && a.reserve < limits_.reserve_per_address) {
    ++reserve_;
    ++a.reserve;
    return Lane::kReserve;
  }
  if (a.normal == 0 && a.reserve == 0) by_address_.erase(address);
  return Lane::kRefused;
}

void ConnectionLimiter::Release(const std::string& address, Lane lane) {
  std::lock_guard lock(mu_);
  auto it = by_address_.find(address);
  if (it == by_address_.end()) return;
  if (lane == Lane::kNormal && it->second.normal > 0) {
    --it->second.normal;
    --normal_;
  } else if (lane == Lane::kReserve && it->second.reserve > 0) {
    --it->second.reserve;
    --reserve_;
  }
  if (it->second.normal == 0 && it->second.reserve == 0) by_address_.erase(it);
}

size_t ConnectionLimiter::open() const {
  std::lock_guard lock(mu_);
  return normal_ + reserve_;
}

size_t ConnectionLimiter::open_reserve() const {
  std::lock_guard lock(mu_);
  return reserve_;
}

}  // namespace kiln::broker
