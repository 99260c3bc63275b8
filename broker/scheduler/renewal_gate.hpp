// RenewalGate: whether a broker may take other brokers over, from the times
// Redis answered its own renewals. Pure logic; the dispatcher's thread.
//
//   gate.Answered(NowMs());                  // a renewal succeeded
//   if (gate.MayClaim(NowMs())) Claim(...);  // others silent for a window are dead
//
// A broker silent for a window is dead only if it could have renewed: after
// a stall of Redis (or of this broker) no broker renewed, and the first to
// renew afterwards must not take the others over. So claims wait until
// Redis has answered this broker's renewals, without a gap as long as the
// window, for a whole window.
#pragma once

#include <cstdint>

namespace kiln::broker {

class RenewalGate {
 public:
  explicit RenewalGate(int64_t window_ms) : window_ms_(window_ms) {}

  // A renewal's answer arrived at answered_ms (wall clock).
  void Answered(int64_t answered_ms) {
    if (last_ms_ == 0 || answered_ms - last_ms_ >= window_ms_) since_ms_ = answered_ms;
    last_ms_ = answered_ms;
  }

  bool MayClaim(int64_t now_ms) const { return last_ms_ != 0 && now_ms - since_ms_ >= window_ms_; }

 private:
  int64_t window_ms_;
  int64_t last_ms_ = 0;   // the last answer
  int64_t since_ms_ = 0;  // answers without a gap since
};

}  // namespace kiln::broker
