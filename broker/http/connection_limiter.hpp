// ConnectionLimiter: decides at accept whether a new HTTP connection is
// served, served only for health and metrics (the reserve lane), or refused
// at once — from how many connections are open in all and from its address.
//
//   ConnectionLimiter limiter({.max_total = 10000, .max_per_address = 1024});
//   auto lane = limiter.Admit("10.0.0.7");   // counted unless kRefused
//   ...
//   limiter.Release("10.0.0.7", lane);
//
// The reserve lane keeps /v1/health and /metrics answering while a client
// (or many) holds every normal connection: it is small, per-address capped,
// and its connections live for a few seconds only. Pure bookkeeping, no I/O.
// Thread-safe.
#pragma once

#include <cstddef>
#include <mutex>
#include <string>
#include <unordered_map>

namespace kiln::broker {

class ConnectionLimiter {
 public:
  struct Limits {
    size_t max_total = 10000;
    size_t max_per_address = 1024;
    size_t reserve_total = 64;
    size_t reserve_per_address = 4;
  };
  enum class Lane { kNormal, kReserve, kRefused };

  explicit ConnectionLimiter(Limits limits) : limits_(limits) {}

  Lane Admit(const std::string& address);
  // Once per admitted connection (kNormal or kReserve), when it closes.
  void Release(const std::string& address, Lane lane);

  size_t open() const;          // normal + reserve
  size_t open_reserve() const;  // reserve only

 private:
  struct PerAddress {
    size_t normal = 0;
    size_t reserve = 0;
  };

  Limits limits_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, PerAddress> by_address_;
  size_t normal_ = 0;
  size_t reserve_ = 0;
};

}  // namespace kiln::broker
