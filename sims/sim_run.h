// `moerl sim run`: carries a scenario out against a job and measures what each fault cost.
//
// Local mode (no --against): starts a local cluster of the scenario's shape with
// up/local_job.h (the `moerl up` machinery, one `moerl node` process per node), with
// nodes that the timeline partitions started inside their own network namespace
// (sims/netns_link.h). Attach mode (--against HOST:PORT): uses a running job's console;
// kills need the node to run on this host, or a delivery command that reaches it where it runs
// (--deliver-via, sims/fault_delivery.h: pods); partitions and coordinator restarts are skipped.
//
// Faults are injected on schedule: spot notices through the console's `inject spot`, kills
// and SIGTERMs as blows of the fault delivery (signals to the pid the console's `nodes` reply
// gives, or the delivery command), slow nodes as a stop/cont duty cycle, partitions by cutting
// the node's veth link. Each fault gets:
//   injected_at   when the runner injected it
//   detected_at   first poll where the console shows the node draining, drained or dead
//                 (coordinator restart: first console call that failed)
//   recovered_at  first poll where the job is productive again: the replacement (when the
//                 scenario replaces nodes) is running and the committed count has grown
//                 since; otherwise the committed count has grown since detection (or since
//                 the partition healed / the slowdown ended / the coordinator came back)
// Then the same scenario and seed run fault-free for the baseline iteration times.
#pragma once

#include <string>
#include <vector>

#include "common/error.h"
#include "sims/report.h"
#include "sims/scenario.h"

namespace moerl::sims {

struct run_options {
  std::string against;  // console HOST:PORT of a running job; empty: start a local cluster
  // Attach mode: the command that strikes and replaces nodes (sims/fault_delivery.h, e.g.
  // `scripts/pods.sh fault`); empty: signals to moerl node processes on this host.
  std::string deliver_via;
  bool short_form = false;             // for the report only; the scenario is already shortened
  bool baseline = true;                // also run the fault-free baseline (local mode)
  std::string config_file;             // for every node of a local cluster, and the console token
  std::vector<std::string> overrides;  // key=value, after the scenario's cluster.set
  std::string binary;                  // the moerl executable; empty: this process's own
  std::string work_dir;                // logs and the ledger store; empty: a fresh /tmp directory
  bool keep_work_dir = false;          // keep it even when the run passes
  int poll_ms = 200;                   // console poll period
};

result<run_measurements> run_scenario(const scenario& s, const run_options& o);

}  // namespace moerl::sims
