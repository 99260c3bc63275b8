// ResultAcks: the ResultAcks the dispatcher holds back for a moment, so that
// one reaches its worker together with the next Execute (or with the other
// acks of the next kHold), instead of on a wake-up of its own on both hosts
// right when the next job is on its way.
//
//   acks.Add(worker, job_id, now);                  // its end is stored
//   for (auto& id : acks.TakeFor(worker)) ...;      // before an Execute to `worker`
//   for (auto& [worker, id] : acks.TakeDue(now)) ...;  // every turn of the loop
//   wait = min(wait, *acks.NextDue() - now);
//
// A worker keeps a Result until it is acknowledged, and sends it again
// after every reconnect; so an ack held back, or lost with this broker,
// costs only that resend, which the stored end answers. An ack is held at
// most kHold, and a worker's at most kMaxHeld at a time (the worker keeps
// each Result in memory until then). Not thread-safe: the dispatcher's loop
// owns it.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kiln::broker {

class ResultAcks {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kHold{2};
  static constexpr size_t kMaxHeld = 64;

  void Add(const std::string& worker, std::string job_id, Clock::time_point now);
  // Every ack held for `worker`, oldest first.
  std::vector<std::string> TakeFor(const std::string& worker);
  // Every ack of the workers whose oldest is kHold old, or who have
  // kMaxHeld: (worker, job id) pairs.
  std::vector<std::pair<std::string, std::string>> TakeDue(Clock::time_point now);
  // When TakeDue next has something; nullopt while nothing is held.
  std::optional<Clock::time_point> NextDue() const;

 private:
  struct Held {
    Clock::time_point since;  // when the oldest was added
    std::vector<std::string> ids;
  };
  std::map<std::string, Held, std::less<>> held_;
};

}  // namespace kiln::broker
