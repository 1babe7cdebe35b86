// Standalone `moerl_bench_ledger_main ledger [--json] ...`: the same benchmark as `moerl bench
// ledger`, without linking every other component into the binary.
#include <CLI/CLI.hpp>

#include "bench/ledger/ledger_bench.h"

int main(int argc, char** argv) {
  CLI::App app{"moerl ledger benchmark"};
  app.require_subcommand(1);
  moerl::bench::add_ledger_bench_command(app);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
