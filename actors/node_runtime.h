// `moerl node`: one node process (one pod). Sets up, in this order: the signal watch (before
// any thread, so SIGTERM is handled even as pid 1), the CAF actor system with heartbeats and
// optional TLS, the role's sockets, then either the coordinator (publishes itself at --join,
// owns the ledger, serves the console) or a node agent that joins the coordinator there.
// Returns the process exit status: 0 after a drain or an orderly shutdown; 2 bad input;
// 3 coordinator unreachable; 4 supervisor gave up.
#pragma once

#include <string>
#include <vector>

#include "actors/job.h"

namespace moerl::actors {

struct node_args {
  std::string role;                    // as given on the command line (parse_role, node_role.h)
  std::string join;                    // HOST:PORT of the coordinator (its listen address)
  std::string config_file;             // optional YAML
  std::vector<std::string> overrides;  // key=value
  job_factory make_job;                // required: job::make_job (job.kind picks the job)
};

int run_node(const node_args& args);

}  // namespace moerl::actors
