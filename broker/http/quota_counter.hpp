// QuotaCounter: how many of one kind of thing (requests in progress, waits,
// streams, subscriptions) each tenant holds on this broker, with a cap.
//
//   QuotaCounter waits;
//   QuotaCounter::Hold h = waits.TryAcquire(tenant, /*limit=*/1000);
//   if (!h) return RateLimited();      // released when `h` is destroyed
//
// Thread-safe; a Hold may be released on any thread.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace kiln::broker {

class QuotaCounter {
 public:
  class Hold {
   public:
    Hold() = default;
    Hold(QuotaCounter* counter, std::string tenant)
        : counter_(counter), tenant_(std::move(tenant)) {}
    Hold(Hold&& o) noexcept : counter_(o.counter_), tenant_(std::move(o.tenant_)) {
      o.counter_ = nullptr;
    }
    Hold& operator=(Hold&& o) noexcept {
      if (this != &o) {
        Release();
        counter_ = o.counter_;
        tenant_ = std::move(o.tenant_);
        o.counter_ = nullptr;
      }
      return *this;
    }
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    ~Hold() { Release(); }
    explicit operator bool() const { return counter_ != nullptr; }
    void Release() {
      if (counter_) counter_->Release(tenant_);
      counter_ = nullptr;
    }

   private:
    QuotaCounter* counter_ = nullptr;
    std::string tenant_;
  };

  // An empty Hold when the tenant already holds `limit`.
  Hold TryAcquire(const std::string& tenant, size_t limit);
  size_t count(const std::string& tenant) const;
  size_t total() const;

 private:
  void Release(const std::string& tenant);

  mutable std::mutex mu_;
  std::unordered_map<std::string, size_t> counts_;
  size_t total_ = 0;
};

}  // namespace kiln::broker
