#include <CLI/CLI.hpp>

#include "actors/ledger/bench/ledger_bench.h"
#include "apps/commands.h"
#include "bench/control/control_bench.h"
#include "bench/ep/ep_bench.h"
#include "bench/kernels/kernels_bench.h"
#include "job/bench/job_ep_bench.h"
#include "policy/bench/policy_bench.h"
#include "store/bench/store_bench.h"

namespace moerl::apps {

void add_bench_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("bench", "benchmarks; each prints JSON with provenance");
  cmd->require_subcommand(1);
  // Each benchmark registers itself here: kernels (bench/kernels), ep (bench/ep),
  // control (bench/control).
  moerl::bench::add_kernels_bench_command(*cmd);
  moerl::bench::add_ep_bench_command(*cmd);
  moerl::bench::add_store_bench_command(*cmd);  // store (store/bench)
  moerl::bench::add_policy_bench_command(*cmd);  // policy (policy/bench)
  moerl::bench::add_ledger_bench_command(*cmd);  // ledger (actors/ledger/bench)
  moerl::bench::add_control_bench_command(*cmd);  // control (bench/control)
  moerl::bench::add_job_ep_bench_command(*cmd);  // job-ep (job/bench)
  (void)cmd;
}

}  // namespace moerl::apps
