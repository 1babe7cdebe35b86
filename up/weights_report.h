// The run report's weight-plane figures, from the coordinator's node view (each node's last
// stats): `weights` (per version its size, shard count, coordinator bytes, t_publish, how long
// it took to reach the rollout nodes (p50/max) and what they read for it from caches, peers
// and the store (bytes_from); the run's bytes from each source) and, for each node started
// mid-run, its way to being productive. Times across nodes compare wall clocks (one machine
// for `moerl up`; NTP-level skew across hosts).
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

namespace moerl::up {

// `trainer_job`: the trainer's job stats (with "weights": {"versions": [...]}); `nodes`: the
// report's node list. Null when the trainer published nothing.
nlohmann::json weights_report(const nlohmann::json& trainer_job, const nlohmann::json& nodes);

// A replacement's record (replacement_record::to_json) with time_to_productive_s and its
// phases, seconds each: start (spawned -> process running), join (-> registered), weights
// (-> holds a policy version; rollout and weights nodes), first_commit (-> its first unit
// committed; rollout nodes). time_to_productive_s is their sum up to the last phase the role
// has; null fields: not reached (yet). `spawned_unix_ms`: when the replacement was started.
nlohmann::json with_time_to_productive(nlohmann::json record, int64_t spawned_unix_ms,
                                       const nlohmann::json& nodes);

}  // namespace moerl::up
