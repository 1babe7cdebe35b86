// The autoscaling signal (console/CONSOLE.md, "Autoscaling signal"): how many rollout and env
// replicas the job wants, from the queue depth, the trainer's consumption rate, one rollout
// worker's generation rate, the measured replacement time (down -> replacement productive) and the
// observed interruption rate. The HTTP console serves it at /api/v1/autoscale and as
// moerl_desired_replicas{role} in /metrics, which deploy/'s KEDA ScaledObject scales on.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

namespace moerl::console {

// Watches the nodes view over time: when a node goes down (dead, drained, unreachable) and
// when a replacement of its role becomes productive (a rollout holds its first lease; other
// roles: joined and running). Not thread-safe; the HTTP console's sampler owns it.
class replacement_tracker {
 public:
  void observe(const nlohmann::json& nodes, int64_t now_ms);
  // Mean seconds from a node's down to its replacement being productive; -1 before any.
  double mean_replacement_s() const;
  uint64_t num_replacements() const { return num_replacements_; }
  int64_t first_seen_ms() const { return first_seen_ms_; }

 private:
  std::set<std::string> up_;                            // ids seen productive
  std::set<std::string> down_;                          // ids seen down
  std::map<std::string, std::deque<int64_t>> waiting_;  // role -> down times not yet replaced
  double sum_replacement_s_ = 0;
  uint64_t num_replacements_ = 0;
  int64_t first_seen_ms_ = -1;
};

// The signal as JSON: desired replicas per role, every input and the formula's terms.
// `snapshot` is the coordinator's `snapshot` view; `now_ms` on the tracker's clock.
nlohmann::json autoscale_json(const nlohmann::json& snapshot, const replacement_tracker& tracker,
                              int64_t now_ms);

}  // namespace moerl::console
