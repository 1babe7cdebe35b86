// One simulated host of `moerl bench fleet` (an internal mode of the same command): a process
// with one CAF actor system, connected to the coordinator over the middleman like any node,
// running `nodes` simulated rollout nodes (sim_node.h), each its own node with its own
// identity. The bench drives it through stdin, one command per line:
//   kill FRACTION REPLACE     that fraction of its live nodes die at once (exit_reason::kill,
//                             the coordinator's monitor fires as for a SIGKILLed pod); REPLACE
//                             1 starts as many new nodes (new identities) at once, as a
//                             Deployment's controller would
//   notice FRACTION DEADLINE_MS REPLACE
//                             that fraction get a Spot notice (source imds_spot) whose
//                             deadline is DEADLINE_MS from now, delivered as the node's IMDS
//                             poller would; REPLACE as above
//   stop                      write the record (fleet_record.h) to `out` as JSON and exit 0
// Every command is answered on stdout with one line ("ok kill 25", ...), so the bench knows
// when it took effect.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/fleet/sim_node.h"

namespace moerl::bench {

struct sim_host_args {
  std::string join;                    // coordinator HOST:PORT
  uint32_t nodes = 0;                  // simulated nodes at the start
  uint32_t index = 0;                  // this host's index (seeds its choice of victims)
  std::string out;                     // where `stop` writes the record
  std::vector<std::string> overrides;  // the cluster's config (job, heartbeats, ...)
  sim_node_options node;
};

// Runs the host until `stop` or end of input; the process's exit status.
int run_sim_host(const sim_host_args& a);

}  // namespace moerl::bench
