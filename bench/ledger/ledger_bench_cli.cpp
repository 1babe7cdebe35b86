#include <iostream>

#include <CLI/CLI.hpp>

#include "bench/ledger/ledger_bench.h"
#include "bench/support.h"

namespace moerl::bench {

void add_ledger_bench_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand(
      "ledger", "work-unit ledger lease cycle (in memory, journaled), recovery, sample plane");
  static ledger_bench_options opt;
  static bool as_json = false;
  cmd->add_flag("--json", as_json, "print the report as JSON (it is JSON either way)");
  cmd->add_option("--units", opt.units, "units through the in-memory cycle")
      ->check(CLI::Range(1, 10000000));
  cmd->add_option("--journaled-units", opt.journaled_units, "units through the journaled cycle")
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--samples", opt.samples, "samples through the sample plane")
      ->check(CLI::Range(16, 100000000));
  cmd->add_option("--tick-units", opt.tick_units, "ledger sizes for the coordinator's tick queries")
      ->check(CLI::Range(1, 2000000));
  cmd->add_option("--runs", opt.runs, "repetitions of each measurement")->check(CLI::Range(1, 100));
  cmd->add_option("--scratch", opt.scratch, "directory for the journal store (removed afterwards)");
  cmd->callback([] {
    run_bench_command("ledger",
                      [] { std::cout << run_ledger_bench(opt).dump(as_json ? 2 : 1) << "\n"; });
  });
}

}  // namespace moerl::bench
