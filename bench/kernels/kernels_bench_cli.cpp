#include <iomanip>
#include <iostream>
#include <stdexcept>

#include <CLI/CLI.hpp>

#include "bench/kernels/kernels_bench.h"
#include "bench/support.h"

namespace moerl::bench {

namespace {

void print_table(const nlohmann::json& r) {
  std::cout << "kernels benchmark (" << r["device"].get<std::string>() << "): memcpy " << std::fixed
            << std::setprecision(2) << r["memcpy_gbps"].get<double>() << " GB/s, sgemm "
            << r["sgemm_gflops"].get<double>() << " GFLOP/s\n";
  std::cout << std::left << std::setw(34) << "primitive" << std::right << std::setw(12) << "p50 us"
            << std::setw(12) << "p99 us" << std::setw(10) << "GB/s" << std::setw(10) << "GFLOP/s"
            << "\n";
  for (const auto& e : r["results"]) {
    std::cout << std::left << std::setw(34) << e["name"].get<std::string>() << std::right
              << std::setw(12) << std::setprecision(1) << e["p50_us"].get<double>() << std::setw(12)
              << e["p99_us"].get<double>() << std::setw(10) << std::setprecision(2)
              << e["gbps"].get<double>() << std::setw(10)
              << (e["gflops"].is_null()
                      ? std::string("-")
                      : std::to_string(static_cast<int>(e["gflops"].get<double>())))
              << "\n";
  }
  std::cout << "targets (reached / goal):";
  for (auto it = r["targets"].begin(); it != r["targets"].end(); ++it)
    std::cout << " " << it.key() << " " << std::setprecision(2) << it.value().get<double>() << "/"
              << r["targets_goal"][it.key()].get<double>();
  std::cout << "\n";
}

}  // namespace

void add_kernels_bench_command(CLI::App& bench) {
  auto* cmd =
      bench.add_subcommand("kernels", "time the kernels/ primitives (prefill and decode shapes)");
  static kernels_bench_options opt;
  static bool as_json = false;
  cmd->add_flag("--json", as_json, "print the report as JSON");
  cmd->add_option("--runs", opt.runs, "timed runs per primitive (>= 20 for a result)")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--warmup", opt.warmup, "untimed runs before timing")->check(CLI::Range(0, 1000));
  cmd->add_option("--gemm-runs", opt.gemm_runs, "timed runs of the prefill-size FFN and sgemm")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--threads", opt.threads, "CPU threads (0: all)")->check(CLI::Range(0, 1024));
  cmd->add_flag("--quick", opt.quick, "shrink every shape: a smoke run, not a result");
  cmd->add_flag("--cuda", opt.cuda, "time the CUDA twins (needs a CUDA build and a GPU)");
  cmd->callback([] {
    run_bench_command("kernels", [] {
      const nlohmann::json report = run_kernels_bench(opt);
      if (as_json)
        std::cout << report.dump(2) << "\n";
      else
        print_table(report);
    });
  });
}

}  // namespace moerl::bench
