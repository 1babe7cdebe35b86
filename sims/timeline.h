// Expansion of a scenario + seed into a concrete fault timeline against named nodes.
// Deterministic: the same scenario, seed and roster give the same timeline on every machine
// (sims/internal/sim_rng.h). The roster is what the cluster actually has: for a local cluster the
// names `moerl up` gives its nodes (canonical_roster), for `--against` the console's `nodes`
// reply. Names are sorted per role first, so the order a console lists nodes in is irrelevant.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "sims/scenario.h"

namespace moerl::sims {

// role -> node names
using roster = std::map<std::string, std::vector<std::string>>;

// The node names a local cluster of this shape has (see sims/SCENARIOS.md, "Node names").
roster canonical_roster(const cluster_spec& c);

// One fault against one node at one time.
struct fault_event {
  double at_s = 0.0;  // seconds after the run starts
  fault_kind kind = fault_kind::hard_kill;
  std::string node;  // the node hit (if replaced before at_s, its replacement)
  std::string role;
  size_t fault_index = 0;  // which entry of scenario.faults produced it
  int line = 0;            // that entry's line in the file
  // The entry's parameters (only those of the kind matter).
  double deadline_s = 0.0;
  double notice_after_s = 0.0;
  double grace_s = 0.0;
  double duration_s = 0.0;
  int64_t stop_ms = 0;
  int64_t period_ms = 0;
  double down_s = 0.0;
  kill_phase phase = kill_phase::any;
  bool replace = false;  // start a replacement once the node is gone
  // A fault that leaves its node running (partition, slow_node, env_slow) can still end it:
  // declared dead while cut off or stopped, the node is fenced and exits once it hears the
  // coordinator again. Its pod would be restarted; so is it, when the scenario replaces nodes.
  bool replace_if_exits = false;
  double replace_delay_s = 0.0;  // after the node is gone
};

// Sorted by (at_s, fault_index, node). Errors (errc::invalid_config) name the fault entry's
// line: a named node that is not in the roster, a role with too few nodes for `count`.
result<std::vector<fault_event>> expand(const scenario& s, const roster& nodes);

nlohmann::json to_json(const fault_event& e);
nlohmann::json timeline_json(const std::vector<fault_event>& events);

}  // namespace moerl::sims
