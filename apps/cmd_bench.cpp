#include <CLI/CLI.hpp>

#include "apps/commands.h"
#include "bench/control/control_bench.h"
#include "bench/env/env_bench.h"
#include "bench/ep/ep_bench.h"
#include "bench/fleet/fleet_bench.h"
#include "bench/job_ep/job_ep_bench.h"
#include "bench/kernels/kernels_bench.h"
#include "bench/ledger/ledger_bench.h"
#include "bench/package/package_bench.h"
#include "bench/policy/policy_bench.h"
#include "bench/store/store_bench.h"
#include "bench/weights/weights_bench.h"

namespace moerl::apps {

void add_bench_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("bench", "benchmarks; each prints JSON with provenance");
  cmd->require_subcommand(1);
  // Every benchmark lives in bench/<name>/ and registers its own subcommand.
  moerl::bench::add_kernels_bench_command(*cmd);  // kernels
  moerl::bench::add_ep_bench_command(*cmd);       // ep
  moerl::bench::add_control_bench_command(*cmd);  // control
  moerl::bench::add_fleet_bench_command(*cmd);    // fleet (and its hidden simulated host)
  moerl::bench::add_ledger_bench_command(*cmd);   // ledger
  moerl::bench::add_store_bench_command(*cmd);    // store
  moerl::bench::add_policy_bench_command(*cmd);   // policy
  moerl::bench::add_job_ep_bench_command(*cmd);   // job-ep
  moerl::bench::add_env_bench_command(*cmd);      // env
  moerl::bench::add_weights_bench_command(*cmd);  // weights (and its hidden weights-reader)
  moerl::bench::add_package_bench_command(*cmd);  // package: all of the above, one report
}

}  // namespace moerl::apps
