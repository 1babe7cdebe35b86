#include "sims/stall_meter.h"

#include <algorithm>

namespace moerl::sims {

void stall_meter::add(double from, double to, double seconds) {
  if (seconds <= 0) return;
  total_s_ += seconds;
  // One trainer waits at most one second per second: figures read at poll times (not at the
  // trainer's send times) can show a little more growth than the time between two polls.
  spans_.push_back({std::min(from, to - seconds), to, seconds});
}

void stall_meter::observe(double t, const std::vector<node_view>& nodes) {
  for (const auto& n : nodes) {
    if (n.role != "trainer") continue;
    if (first_) listed_at_start_.insert(n.id);
    if (!n.stats.is_object() || !n.stats.contains("stall_s") || !n.stats["stall_s"].is_number())
      continue;
    const double v = n.stats["stall_s"].get<double>();
    reported_ = true;
    auto it = last_.find(n.id);
    if (it == last_.end()) {
      // First figure of this trainer: from before the run began, or (a trainer that came
      // during the run) all of it, waited since it started.
      if (!listed_at_start_.count(n.id)) add(t - v, t, v);
      last_[n.id] = {v, t};
      continue;
    }
    if (v >= it->second.value) {
      add(it->second.t, t, v - it->second.value);
    } else {
      add(t - v, t, v);  // the trainer group restarted: its clock began again at 0
    }
    it->second = {v, t};
  }
  first_ = false;
}

double stall_meter::between(double from, double to) const {
  double s = 0;
  for (const auto& x : spans_) {
    if (x.to <= x.from) {  // an instant: inside or not
      if (x.to >= from && x.to <= to) s += x.seconds;
      continue;
    }
    const double overlap = std::min(to, x.to) - std::max(from, x.from);
    if (overlap > 0) s += x.seconds * overlap / (x.to - x.from);
  }
  return s;
}

}  // namespace moerl::sims
