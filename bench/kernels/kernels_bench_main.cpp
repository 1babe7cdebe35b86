// moerl_bench_kernels_main: `moerl bench kernels` as its own small binary (same flags), for the
// GPU check script, which must build and run inside a short device lease.
#include <CLI/CLI.hpp>

#include "bench/kernels/kernels_bench.h"

int main(int argc, char** argv) {
  CLI::App app{"moerl kernels benchmark (the same as `moerl bench kernels`)"};
  app.require_subcommand(1);
  moerl::bench::add_kernels_bench_command(app);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
