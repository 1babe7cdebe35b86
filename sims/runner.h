// Private to sims/: the loop that carries a fault timeline out against a job and measures it
// (the contract is in sims/sim_run.h). One object per run; single-threaded: every tick it
// polls the console, then advances each fault's state machine.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sims/fault_delivery.h"
#include "sims/job_console.h"
#include "sims/netns_link.h"
#include "sims/process_control.h"
#include "sims/report.h"
#include "sims/stall_meter.h"
#include "sims/timeline.h"

namespace moerl::sims::detail {

// What the runner may do to the job beyond the console; local and attach mode differ here.
struct job_hooks {
  // Kill the coordinator (SIGKILL) and start it again later (local: the cluster's restart).
  std::function<status()> kill_coordinator;
  std::function<status()> restart_coordinator;
  // Why partitions are impossible for a node (empty: it runs behind a netns link).
  std::function<std::string(const std::string& name)> why_not_partitionable;
  std::function<netns_link*(const std::string& name)> link_of;
  bool coordinator_restartable = false;
};

// The console's view at one poll.
struct observation {
  double t = 0.0;
  bool console_ok = false;
  nlohmann::json status;
  std::vector<node_view> nodes;
  uint64_t committed = 0;
  uint64_t iteration = 0;
  uint64_t leases = 0;

  const node_view* find(const std::string& name) const;  // prefers a live entry
};

struct fault_state {
  fault_record rec;
  enum class phase { pending, arming, active, settled } step = phase::pending;
  pid_t pid = 0;
  uint64_t iteration_at_arm = 0;
  double gone_at = -1.0;              // the node's process is gone
  double replace_at = -1.0;           // when to start the replacement
  bool replacement_starting = false;  // started, its node name not known yet
  double replacement_up_at = -1.0;
  uint64_t committed_ref = 0;  // committed count that recovery must exceed
  // A fault on a trainer: the policy iteration recovery must exceed (rollouts commit on into
  // the buffer while the trainer is down, so committed samples alone do not show training).
  uint64_t iteration_ref = 0;
  bool ref_set = false;
  double deadline_kill_at = -1.0;  // spot reclaim / SIGTERM grace end: SIGKILL if still alive
  double notice_at = -1.0;         // rebalance_then_notice: when the notice goes out
  double end_at = -1.0;            // partition heal / slowdown end / coordinator restart
  bool ended = false;
  double next_toggle = -1.0;  // slow node duty cycle
  bool stopped = false;
};

class runner {
 public:
  // `delivery` strikes the nodes and starts their replacements (sims/fault_delivery.h).
  runner(std::vector<fault_event> timeline, job_console& console, job_hooks hooks,
         fault_delivery& delivery, int poll_ms);

  // Runs until every fault settled and duration_s passed, or duration_s + settle_s.
  void run(double duration_s, double settle_s);
  // Puts every stopped node back to running and heals every cut link (also on early exit).
  void undo_faults();

  std::vector<fault_record> records() const;
  const std::vector<double>& iteration_s() const { return iteration_s_; }
  const observation& last() const { return last_; }
  int64_t trainer_restarts() const;
  // The same for the trainer nodes in no trainer group: a group member's restarts are its
  // group's re-formations, which the coordinator's report lists with their causes.
  int64_t ungrouped_trainer_restarts() const;
  // The trainers' waiting time while the run was watched (see sims/stall_meter.h).
  const stall_meter& stall() const { return stall_; }
  // Seconds from the first poll to the last: the window stall() covers.
  double observed_s() const { return last_.t - first_t_; }
  // Nodes that ended dead or drained although no fault aimed at them (or their predecessor).
  std::vector<std::string> collateral_losses() const;

 private:
  double now() const;
  void observe();
  void step(fault_state& f);
  void inject(fault_state& f, const node_view* n);
  void track(fault_state& f);
  void start_replacement(fault_state& f);
  void await_replacement(fault_state& f);
  node_ref target_of(const fault_state& f) const;
  // The node's process is gone: as the delivery tells, else as the console shows it.
  bool node_gone(const fault_state& f, const node_view* n);
  std::string current_name(const std::string& planned) const;
  // An earlier fault removed this node and its replacement is on the way.
  bool replacement_pending(const std::string& planned) const;

  std::vector<fault_state> faults_;
  job_console& console_;
  job_hooks hooks_;
  fault_delivery& delivery_;
  std::map<std::string, std::string> alias_;  // planned name -> the node now in its place
  std::map<std::string, int> replacements_made_;
  int poll_ms_;
  std::chrono::steady_clock::time_point t0_;
  observation last_;
  double first_t_ = 0.0;
  stall_meter stall_;
  std::map<std::string, uint32_t> trainer_restarts_at_start_;
  std::vector<double> iteration_s_;
  double last_iteration_change_ = 0.0;
  uint64_t last_iteration_ = 0;
  bool iteration_seen_ = false;
  double duration_s_ = 0.0;
};

}  // namespace moerl::sims::detail
