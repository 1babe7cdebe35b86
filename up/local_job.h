// A job on this machine: the one owner of the local cluster's nodes and their lifecycle
// (starting them, adding one, replacing one that ended, stopping them all) and of the job's
// progress and report. `moerl up` (apps/cmd_up.cpp) runs a job to its end with it; the local
// mode of `moerl sim run` (sims/sim_run.cpp) starts and stops its jobs with it and drives the
// faults itself.
//
// Lifecycle: configure() checks the configuration and starts nothing; start() starts the
// coordinator, waits for its console, then every node; stop() (or the destructor) ends them.
// While run() drives the job it is also every node's pod controller (up/pod_policy.h):
// a node that dies, drains or exits is replaced after a delay with backoff, the coordinator
// restarted from its journal, and a node that gave up, or one replaced cluster.max_restarts
// times, ends the job as failed. The sims' local mode drives faults and replacements itself
// and never calls run().
// Not thread-safe (one driver, like local_cluster).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/config.h"
#include "common/error.h"
#include "up/local_cluster.h"
#include "up/pod_policy.h"

namespace moerl::up {

struct local_job_options {
  std::string binary;                  // the moerl executable; "" : this process's own
  std::string config_file;             // passed to every node ("" for none)
  std::vector<std::string> overrides;  // key=value for every node, before the job's own below
  std::string console;                 // console.address (see cluster_options::console)
  std::string log_dir;                 // <log_dir>/<node>.log
  // The run's place in the store: its ledger journal under <store_prefix>/ledger and its
  // weights and checkpoints under <store_prefix>/job, so a run never resumes another's.
  // "" keeps the config's ledger.store_prefix and job.store_prefix.
  std::string store_prefix;
  int64_t iterations = 0;  // actors.iterations when > 0
  // Every node on one BLAS thread (unless OPENBLAS_NUM_THREADS is set already), so the
  // nodes sharing this machine's cores do not oversubscribe them.
  bool one_blas_thread_per_node = false;
  std::vector<node_spec> nodes;  // not counting the coordinator (always first)
};

// How run() drives the job to its end.
struct run_policy {
  std::chrono::steady_clock::time_point deadline;  // run() gives up here
  // One Spot interruption notice into a running rollout node once a third of the iterations
  // are done, as a node on Spot capacity would get; the node is replaced after it drained.
  bool spot_interruption = true;
  int spot_deadline_s = 20;
};

// How run() ended.
enum class run_outcome {
  done,       // the coordinator reported the job done
  timed_out,  // the policy's deadline passed first
  failed,     // the job cannot make progress: local_job::failure() says why
};

// What run() tells its driver as it happens; every member may be empty.
struct job_events {
  // The job's status line (with the learning figures once the trainer reports them),
  // whenever it changed.
  std::function<void(const std::string& line)> progress;
  // Every poll (twice a second): the coordinator's status and the trainer's job figures
  // (reward curve; an empty object before it reports), for a driver that draws its own
  // progress (moerl up's in-place line).
  std::function<void(const nlohmann::json& status, const nlohmann::json& job_stats)> polled;
  // A Spot interruption notice was sent to `node` (`sent` says why not when it failed).
  std::function<void(const std::string& node, int deadline_s, const status& sent)> spot_notice;
  // A node exited (`cause`: "exit code 0", "killed by SIGKILL"); its replacement starts
  // after `delay`.
  std::function<void(const std::string& node, const std::string& cause,
                     std::chrono::milliseconds delay)>
      exited;
  // A replacement was started (or failed to start: record.error).
  std::function<void(const replacement_record& record)> replaced;
  // A node the coordinator declared dead (`why`) still ran and was killed (see
  // local_job::kill_dead_but_running).
  std::function<void(const std::string& node, const std::string& why)> killed_dead;
};

class local_job {
 public:
  // Loads the configuration every node will run with; errc::invalid_config names what is
  // wrong. Starts nothing.
  static result<std::unique_ptr<local_job>> configure(local_job_options opts);

  // The coordinator, then every node of the options; errors name what did not come up.
  status start();

  // ---- nodes and their lifecycle (after start()) -------------------------------------------
  local_cluster& cluster() { return *cluster_; }
  const std::string& console_address() const { return cluster_->console_address(); }
  const std::string& http_address() const { return cluster_->http_address(); }
  const std::string& coordinator_join() const { return cluster_->coordinator_join(); }
  // One more node, e.g. inside a network namespace (see local_cluster::add_node).
  status add_node(const node_spec& spec, const std::vector<std::string>& exec_prefix = {});
  // Console shutdown, then SIGKILL for whatever still runs after timeout_ms.
  status stop(int64_t timeout_ms);

  // ---- progress and report -----------------------------------------------------------------
  // Polls the job until it is done, the policy's deadline passes or it fails, reporting
  // progress, interrupting a rollout node as the policy says and replacing every node that
  // ends.
  run_outcome run(const run_policy& policy, const job_events& events);
  // Why the job failed ("" unless run() returned run_outcome::failed).
  const std::string& failure() const { return failure_; }
  // The cause the node that gave up reported ("" when none did, or it could not report).
  const std::string& failure_cause() const { return failed_cause_; }
  // The coordinator's report once the trainer has stepped on everything it was handed (when
  // the job is done), with the trainer's learning figures, the replacements, the restart
  // policy and the failure if any. When the console does not answer: {"error": ...} with the
  // accounting of the last status seen.
  nlohmann::json settled_report(bool done);

  // The configuration every node runs with.
  const config& node_config() const { return config_; }

 private:
  local_job(cluster_options cluster_opts, config cfg, restart_limits limits)
      : cluster_opts_(std::move(cluster_opts)), config_(std::move(cfg)), limits_(limits) {}
  // Reaps exited nodes and starts the replacements that are due; an error naming the cause
  // when the job cannot go on (a node gave up or reached cluster.max_restarts).
  status supervise(const job_events& events);
  // A node seen exited for the first time: schedules its replacement, or says why not.
  status schedule_replacement(const std::string& name, int wait_status, const job_events& events);
  // The cause `name` reported to the coordinator when it gave up; "" when it reported none.
  std::string reported_cause(const std::string& name);
  // Sends the policy's Spot notice to the first running rollout node of this job.
  void interrupt_a_rollout(const run_policy& policy, const job_events& events);
  // SIGKILLs a node the coordinator declared dead whose process still runs kDeadGrace later,
  // as a failing liveness probe would have its pod killed: the node fences itself on its
  // next exchange with the coordinator, so this only acts where that exchange hangs.
  void kill_dead_but_running(const nlohmann::json& nodes, const job_events& events);

  // A node that exited, waiting for its replacement.
  struct pending_replacement {
    std::string cause;
    std::chrono::milliseconds delay;
    std::chrono::steady_clock::time_point due;
  };

  cluster_options cluster_opts_;
  config config_;
  restart_limits limits_;
  std::unique_ptr<local_cluster> cluster_;
  std::chrono::steady_clock::time_point started_at_;
  std::map<std::string, pending_replacement> pending_;  // node name -> its replacement
  // A node's lineage: the name it was first started under, which its replacements count on.
  std::map<std::string, std::string> lineage_;   // current name -> first name
  std::map<std::string, int64_t> num_replaced_;  // first name -> replacements so far
  std::vector<replacement_record> replacements_;
  // "name pid" of a node seen declared dead while its process runs -> when first seen so.
  std::map<std::string, std::chrono::steady_clock::time_point> dead_but_running_;
  std::string failure_;
  std::string failed_node_;     // the node that gave up, when one did
  std::string failed_cause_;    // the cause it reported to the coordinator ("" if none)
  nlohmann::json last_status_;  // the last status the console answered, for a failed report
};

}  // namespace moerl::up
