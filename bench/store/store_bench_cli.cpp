// `moerl bench store [--url U] [--sizes a,b] [--reps N] [--config F] [--set k=v] [--json]`
#include <CLI/CLI.hpp>

#include <iomanip>
#include <iostream>

#include "bench/store/store_bench.h"
#include "bench/support.h"

namespace moerl::bench {

namespace {

void print_table(const nlohmann::json& r) {
  std::cout << "store benchmark: " << r["durable_plane"]["store"].get<std::string>() << "\n";
  std::cout << std::left << std::setw(24) << "op" << std::right << std::setw(12) << "bytes"
            << std::setw(10) << "p50 ms" << std::setw(10) << "p99 ms" << std::setw(10) << "mean ms"
            << std::setw(10) << "MB/s"
            << "\n";
  for (const auto& e : r["results"]) {
    if (e["op"] == "list") {
      std::cout << std::left << std::setw(24) << "list" << std::right << std::setw(12)
                << e["bytes"].get<int64_t>() << std::setw(10) << std::fixed << std::setprecision(2)
                << e["ms"].get<double>() << "  (" << e["keys"].get<int>() << " keys)\n";
      continue;
    }
    std::cout << std::left << std::setw(24) << e["op"].get<std::string>() << std::right
              << std::setw(12) << e["bytes"].get<int64_t>() << std::setw(10) << std::fixed
              << std::setprecision(2) << e["p50_ms"].get<double>() << std::setw(10)
              << e["p99_ms"].get<double>() << std::setw(10) << e["mean_ms"].get<double>()
              << std::setw(10);
    if (e.contains("mb_per_s")) {
      std::cout << e["mb_per_s"].get<double>() << "\n";
    } else {
      std::cout << "-"
                << "\n";
    }
  }
}

}  // namespace

void add_store_bench_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand(
      "store", "put/get/list/remove latency and throughput of the object store");
  auto opt = std::make_shared<store_bench_options>();
  auto config_file = std::make_shared<std::string>();
  auto overrides = std::make_shared<std::vector<std::string>>();
  auto as_json = std::make_shared<bool>(false);
  cmd->add_option("--url", opt->url,
                  "store to measure (path, file:///dir, s3://bucket/prefix); default: store.url if "
                  "configured, else a temporary directory");
  cmd->add_option("--sizes", opt->sizes, "object sizes in bytes")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 34));
  cmd->add_option("--reps", opt->reps, "timed objects per size")->check(CLI::Range(1, 100000));
  cmd->add_option("--warmup", opt->warmup, "untimed put/get pairs per size")
      ->check(CLI::Range(0, 1000));
  cmd->add_option("--checkpoint-bytes", opt->checkpoint_bytes,
                  "size of the timed checkpoint (0: skip)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 36));
  cmd->add_option("--checkpoint-parts", opt->checkpoint_parts, "parts of the timed checkpoint")
      ->check(CLI::Range(1, 10000));
  cmd->add_option("--checkpoint-reps", opt->checkpoint_reps, "timed checkpoints")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--config", *config_file, "YAML config file (store.* keys)");
  cmd->add_option("--set", *overrides, "config override key=value (repeatable)");
  cmd->add_flag("--json", *as_json, "print the report as JSON");
  cmd->callback([=] {
    auto cfg = config::load(*config_file, *overrides);
    if (!cfg) {
      std::cerr << "moerl bench store: " << cfg.err().to_string() << "\n";
      throw CLI::RuntimeError(2);
    }
    run_bench_command("store", [&] {
      const nlohmann::json report = run_store_bench(*opt, cfg.value());
      if (*as_json) {
        std::cout << report.dump(2) << "\n";
      } else {
        print_table(report);
      }
    });
  });
}

}  // namespace moerl::bench
