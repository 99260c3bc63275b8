// WorkerLiveness: which workers a broker still hears, without I/O.
//
//   WorkerLiveness live(interval, /*liveness=*/3);
//   live.Turn(now);                        // every loop turn, before anything else
//   live.Register(id, now); live.Heard(id, now);
//   for (auto& id : live.Expire(now)) { ... declare it dead ... }
//
// Paranoid Pirate liveness: a worker silent for interval x liveness is dead.
// Silence is only the worker's fault while this broker was there to listen:
// when a loop turn comes more than one interval after the previous one (the
// broker was paused, swapped out or starved), every worker gets a fresh
// window, so a broker's own stall never ends other people's jobs.
// Belongs to the WorkerGateway's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kiln::broker {

class WorkerLiveness {
 public:
  using Clock = std::chrono::steady_clock;

  WorkerLiveness(Clock::duration interval, uint32_t liveness)
      : interval_(interval), dead_after_(interval * liveness) {}

  // Once per loop turn. True when the loop was away longer than an interval
  // (every worker's window then starts again at `now`).
  bool Turn(Clock::time_point now);
  void Register(const std::string& id, Clock::time_point now) { last_heard_[id] = now; }
  // False when the worker is unknown (it must register first).
  bool Heard(const std::string& id, Clock::time_point now);
  bool Known(const std::string& id) const { return last_heard_.count(id) != 0; }
  void Remove(const std::string& id) { last_heard_.erase(id); }
  // Removes and returns the workers silent longer than interval x liveness.
  std::vector<std::string> Expire(Clock::time_point now);
  // Workers silent for more than 1.5 intervals (they beat once per interval).
  size_t Late(Clock::time_point now) const;
  std::vector<std::string> Ids() const;

 private:
  Clock::duration interval_;
  Clock::duration dead_after_;
  std::map<std::string, Clock::time_point> last_heard_;
  Clock::time_point last_turn_{};
};

}  // namespace kiln::broker
