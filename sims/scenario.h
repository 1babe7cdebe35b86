// An interruption scenario: a cluster shape plus a list of fault specifications, as read from
// sims/scenarios/*.yaml. The schema is documented in sims/SCENARIOS.md; load_scenario() is
// the only way to build one from text and refuses anything the schema does not allow, naming
// the file, the line and the field. A scenario is abstract (roles, counts, rates); expand()
// in sims/timeline.h turns it plus a seed into concrete faults against named nodes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"

namespace moerl::sims {

enum class fault_kind {
  spot_notice,            // console `inject spot NODE --deadline S`; the node drains
  rebalance_then_notice,  // rebalance recommendation, then a spot notice notice_after_s later
  hard_kill,              // SIGKILL to the node's pid: no notice, leases must expire
  sigterm,                // SIGTERM (a kubelet drain); SIGKILL after grace_s if still alive
  partition,              // the node's veth link is cut for duration_s, then restored
  slow_node,              // SIGSTOP/SIGCONT duty cycle (stop_ms of every period_ms)
  reward_crash,           // SIGKILL of a reward node (the reward model process)
  shard_loss,             // SIGKILL of a buffer node (one experience-buffer shard)
  coordinator_restart,    // SIGKILL of the coordinator, restarted down_s later
  env_kill,               // SIGKILL of an env node mid-episode (its sessions are lost)
  env_slow,               // an env node's SIGSTOP/SIGCONT duty cycle: every step waits
  weights_loss,           // SIGKILL of a weights node (one checkpoint cache, weights/)
};

// Stable snake_case name, as written in scenario files and reports.
const char* fault_kind_name(fault_kind k);
std::optional<fault_kind> parse_fault_kind(const std::string& name);
// The role a fault targets when the scenario names none.
const char* default_role(fault_kind k);
// Faults whose node is gone afterwards (and so may be replaced).
bool removes_node(fault_kind k);
// Faults that stop and continue their node for duration_s (slow_node, env_slow): the node
// keeps heartbeating between stops, so neither needs to be detected.
bool is_duty_cycle(fault_kind k);

// Which node(s) a fault hits. Exactly one of the three forms:
//   node                      one named node
//   role + count|fraction     that many nodes of the role, chosen with the seed
//   role + rate_per_node_hour a Poisson process per node of the role over window
struct target_spec {
  std::string node;
  std::string role;
  int64_t count = 0;              // > 0 when chosen by count
  double fraction = 0.0;          // (0,1] when chosen by fraction; rounds up
  double rate_per_node_hour = 0;  // > 0 for the Poisson form
  double window_start_s = 0.0;    // Poisson window; end < 0 means "until duration_s"
  double window_end_s = -1.0;
};

// When a hard kill lands relative to the job's phase (status reply's "phase").
enum class kill_phase { any, generation, weights };
const char* kill_phase_name(kill_phase p);

struct fault_spec {
  fault_kind kind = fault_kind::hard_kill;
  int line = 0;  // 1-based line of the entry in the file, for messages
  target_spec target;
  double at_s = 0.0;      // first injection time, seconds after the run starts
  double spread_s = 0.0;  // each chosen node gets at_s + uniform[0, spread_s)
  // Kind parameters; only those of the kind may appear in the file.
  double deadline_s = 120.0;           // spot_notice, rebalance_then_notice
  double notice_after_s = 30.0;        // rebalance_then_notice
  double grace_s = 30.0;               // sigterm
  double duration_s = 0.0;             // partition, slow_node, env_slow (required there)
  int64_t stop_ms = 300;               // slow_node, env_slow
  int64_t period_ms = 1000;            // slow_node, env_slow
  double down_s = 2.0;                 // coordinator_restart
  kill_phase phase = kill_phase::any;  // hard_kill
  std::optional<bool> replace;         // overrides replacement.enabled for this fault
};

struct cluster_spec {
  int64_t rollout = 2;
  int64_t reward = 1;
  int64_t buffer = 2;
  int64_t trainer_ranks = 2;
  // Trainer node processes trainer-0 .. forming one trainer group (trainer.group_size); 1:
  // the one-process trainer. A group runs the GRPO job (the modpow test work has no group).
  int64_t trainer_members = 1;
  int64_t env = 0;               // env nodes env-0 .. (the environment plane, env/ENV.md)
  int64_t weights = 1;           // weights nodes (checkpoint caches)
  std::vector<std::string> set;  // "key=value" config overrides for every node
};

struct replacement_spec {
  bool enabled = true;
  double delay_s = 10.0;  // a replacement joins this long after its node went away
};

// What `--short` changes; unset fields keep the long form's value.
struct short_form {
  std::optional<double> duration_s;
  std::optional<double> settle_s;
  double time_scale = 1.0;  // multiplies every time in the fault list (and divides rates)
  std::optional<cluster_spec> cluster;
  std::optional<replacement_spec> replacement;
};

struct scenario {
  std::string file;  // where it was loaded from (for messages)
  std::string name;
  std::string description;
  uint64_t seed = 1;
  double duration_s = 0.0;  // faults are scheduled in [0, duration_s)
  double settle_s = 20.0;   // time allowed after the last fault for recovery
  cluster_spec cluster;
  replacement_spec replacement;
  short_form short_run;
  std::vector<fault_spec> faults;
};

// Parses and validates a scenario file. Errors are errc::invalid_config with a message
// "FILE:LINE: FIELD: what is wrong".
result<scenario> load_scenario(const std::string& path);
// Same, from text; `origin` stands in for the file name in messages.
result<scenario> parse_scenario(const std::string& text, const std::string& origin);

// The scenario as `--short` runs it: short-form overrides applied and times scaled.
scenario apply_short_form(const scenario& s);

}  // namespace moerl::sims
