// What a simulation run measured, the invariants judged from it, and the report in both
// forms: JSON (`moerl sim run --json`, `--report FILE`) and a human summary. Built from plain
// inputs so it is tested without a cluster; the runner (sims/runner.h) fills the inputs.
// Times are seconds since the run started; a negative time means "never happened".
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sims/timeline.h"

namespace moerl::sims {

struct fault_record {
  fault_event planned;  // what the timeline said
  std::string node;     // the node actually hit (a replacement if the planned one was gone)
  double injected_at = -1.0;
  double detected_at = -1.0;   // the coordinator saw the node leave, drain or go silent
  double recovered_at = -1.0;  // a replacement (or the node itself) was productive again
  std::string replacement;     // name of the node that replaced it, if any
  std::string group;           // the node's group across nodes at injection ("" in none)
  std::string skipped;         // non-empty: not injected, and why (e.g. no network namespaces)
  std::string note;            // anything else worth a line in the report
  // How long the trainer waited for data from injection to recovery (to the end of the run
  // if it never recovered); < 0: not reported or not injected.
  double trainer_stall_s = -1.0;
};

struct run_measurements {
  std::string scenario;
  std::string file;
  uint64_t seed = 0;
  bool short_form = false;
  std::string target;  // "local cluster" or "HOST:PORT"
  double wall_s = 0.0;
  std::vector<fault_record> faults;
  // The coordinator's accounting object: {dispatched, committed, in_flight,
  // dropped: {reason: n}, lost, duplicated, trained}; null when it could not be read.
  nlohmann::json accounting;
  // Work-unit outcomes as the coordinator counts them (returned, expired, rerun), if reported.
  nlohmann::json units;
  // Time the trainers waited for data while the runner watched (observed_s); < 0: not
  // reported. The baseline's is over its own, shorter window, hence the fractions.
  double trainer_stall_s = -1.0;
  double observed_s = 0.0;
  double baseline_trainer_stall_s = -1.0;
  double baseline_observed_s = 0.0;
  std::vector<double> iteration_s;           // duration of each policy iteration, in order
  std::vector<double> baseline_iteration_s;  // the fault-free run of the same scenario and seed
  std::string baseline_note;                 // why there is no baseline, if there is none
  int64_t trainer_restarts = 0;              // trainer restarts during the run
  // Of those, the restarts of trainer nodes in no trainer group.
  int64_t ungrouped_trainer_restarts = 0;
  // The trainer group's re-formations (the coordinator's report, groups[].reformed, each
  // with its `group`): [{group, at, cause, restored_version, downtime_s}]. A member's loss
  // re-forms its group; these are kept apart from trainer restarts by a rollout loss.
  nlohmann::json trainer_group_reformations = nlohmann::json::array();
  // Rollout EP groups across nodes (rollout.group_size > 1): their re-formations, the same
  // form; never judged against the trainer's invariant (a rollout loss re-forms only them).
  nlohmann::json rollout_group_reformations = nlohmann::json::array();
  std::string work_dir;  // logs and ledger store of a local run
  // What the live buffer shards refused, summed: {fenced, duplicate, purged, stale_policy}
  // (late samples of a fenced attempt show up here, not in the ledger's accounting).
  nlohmann::json shards;
  // Episodes of the environment plane that failed, by reason (timeout, env_restarted, ...),
  // summed over the live rollout nodes' stats (env.episodes_failed); {} without env nodes.
  nlohmann::json env_episodes_failed = nlohmann::json::object();
  // Nodes no fault aimed at that ended dead or drained: "name (state)". Collateral damage.
  std::vector<std::string> collateral_losses;
};

struct invariant_verdict {
  std::string name;
  bool ok = false;
  std::string detail;
};

// Judges the run. Each verdict names its invariant; see SCENARIOS.md "Invariants".
std::vector<invariant_verdict> evaluate_invariants(const run_measurements& m);

// "fail" when an invariant broke; else "skipped" when every fault was skipped; else "pass".
std::string overall_verdict(const run_measurements& m, const std::vector<invariant_verdict>& v);

// The JSON report: scenario, seed, short, target, wall_s, faults [{kind, node, injected_at,
// detected_at, recovered_at, ...}], accounting, units, trainer_stall_s, iteration_s,
// baseline_iteration_s, mean_iteration_s, baseline_mean_iteration_s, invariants [{name, ok,
// detail}], verdict, provenance (as given).
nlohmann::json report_json(const run_measurements& m, const std::vector<invariant_verdict>& v,
                           const nlohmann::json& provenance);

// A few lines for a person: verdict, one line per fault, accounting, iteration times.
std::string human_summary(const nlohmann::json& report);

}  // namespace moerl::sims
