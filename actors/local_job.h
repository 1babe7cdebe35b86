// A job on this machine: the one owner of the local cluster's nodes and their lifecycle
// (starting them, adding one, replacing a drained one, stopping them all) and of the job's
// progress and report. `moerl up` (apps/cmd_up.cpp) runs a job to its end with it; the local
// mode of `moerl sim run` (sims/sim_run.cpp) starts and stops its jobs with it and drives the
// faults itself.
//
// Lifecycle: configure() checks the configuration and starts nothing; start() starts the
// coordinator, waits for its console, then every node; stop() (or the destructor) ends them.
// A node marked with replace_after_drain() is started again from its spec a while after it
// exited; a coordinator that exits ends run() with an error.
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

#include "actors/local_cluster.h"
#include "common/config.h"
#include "common/error.h"

namespace moerl::actors {

struct local_job_options {
  std::string binary;                  // the moerl executable; "" : this process's own
  std::string config_file;             // passed to every node ("" for none)
  std::vector<std::string> overrides;  // key=value for every node, before the job's own below
  std::string console;                 // console.address; "" keeps the config's
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
  std::chrono::seconds replacement_delay{5};  // the Spot pool refilling
};

// What run() tells its driver as it happens; every member may be empty.
struct job_events {
  // The job's status line (with the learning figures once the trainer reports them),
  // whenever it changed.
  std::function<void(const std::string& line)> progress;
  // A Spot interruption notice was sent to `node` (`sent` says why not when it failed).
  std::function<void(const std::string& node, int deadline_s, const status& sent)> spot_notice;
  // A node marked by replace_after_drain() exited; its replacement starts after `delay`.
  std::function<void(const std::string& node, int wait_status, std::chrono::seconds delay)> drained;
  // The replacement of `node` was started (`started` says why not when it failed).
  std::function<void(const std::string& node, const status& started)> replaced;
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
  const std::string& coordinator_join() const { return cluster_->coordinator_join(); }
  // One more node, e.g. inside a network namespace (see local_cluster::add_node).
  status add_node(const node_spec& spec, const std::vector<std::string>& exec_prefix = {});
  // Once `name` has drained and exited, start it again from its spec after `delay`.
  void replace_after_drain(const std::string& name, std::chrono::seconds delay);
  // Console shutdown, then SIGKILL for whatever still runs after timeout_ms.
  status stop(int64_t timeout_ms);

  // ---- progress and report -----------------------------------------------------------------
  // Polls the job until it is done (true) or the policy's deadline passes (false), reporting
  // progress and interrupting / replacing a rollout node as the policy says. An error when
  // the coordinator exited.
  result<bool> run(const run_policy& policy, const job_events& events);
  // The coordinator's report once the trainer has stepped on everything it was handed (when
  // the job is done), with the trainer's learning figures; {"error": ...} when the console
  // does not answer.
  nlohmann::json settled_report(bool done);

  // The configuration every node runs with.
  const config& node_config() const { return config_; }

 private:
  explicit local_job(cluster_options cluster_opts, config cfg)
      : cluster_opts_(std::move(cluster_opts)), config_(std::move(cfg)) {}
  // Reaps exited nodes and starts the replacements that are due; an error when the
  // coordinator exited.
  status supervise(const job_events& events);
  // Sends the policy's Spot notice to the first running rollout node.
  void interrupt_a_rollout(const run_policy& policy, const job_events& events);

  // A node to start again after it drained; `due` is set once its exit was seen.
  struct pending_replacement {
    std::chrono::seconds delay;
    std::chrono::steady_clock::time_point due{};
  };

  cluster_options cluster_opts_;
  config config_;
  std::unique_ptr<local_cluster> cluster_;
  std::map<std::string, pending_replacement> replacements_;
};

}  // namespace moerl::actors
