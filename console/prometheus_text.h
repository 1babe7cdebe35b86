// /metrics: the coordinator's snapshot view and the autoscaling signal in the Prometheus text
// exposition format (version 0.0.4). Names follow Prometheus conventions: moerl_ prefix, base
// units (seconds, samples), counters end in _total. docs/GUIDE.md's "HTTP console" lists them.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace moerl::console {

// `snapshot`: the coordinator's `snapshot` view; `autoscale`: autoscale_json's result.
std::string prometheus_text(const nlohmann::json& snapshot, const nlohmann::json& autoscale);

}  // namespace moerl::console
