// How long a consumer sat with nothing to work on, waiting for input: the trainer's stall
// time (`stall_s` in its stats, `trainer_stall_s` in a simulation report). The caller says
// when it starts wanting input and when input arrives; time between the two is waiting.
// Time spent working (between arrival and the next start_waiting) is not counted. Plain
// numbers in, so it is tested without clocks or sleeps.
#pragma once

#include <cstdint>

namespace moerl::actors {

class wait_clock {
 public:
  // Nothing to work on from now_ms; a no-op while already waiting.
  void start_waiting(int64_t now_ms) {
    if (since_ms_ < 0) since_ms_ = now_ms;
  }
  // Input arrived (or work began) at now_ms: the open wait, if any, is closed.
  void stop_waiting(int64_t now_ms) {
    if (since_ms_ < 0) return;
    if (now_ms > since_ms_) total_ms_ += now_ms - since_ms_;
    since_ms_ = -1;
  }
  bool waiting() const { return since_ms_ >= 0; }
  // Everything waited so far, the open wait included up to now_ms, in seconds.
  double waited_s(int64_t now_ms) const {
    int64_t t = total_ms_;
    if (since_ms_ >= 0 && now_ms > since_ms_) t += now_ms - since_ms_;
    return static_cast<double>(t) / 1000.0;
  }

 private:
  int64_t total_ms_ = 0;
  int64_t since_ms_ = -1;  // start of the open wait; < 0: not waiting
};

}  // namespace moerl::actors
