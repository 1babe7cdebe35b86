// `moerl bench weights [--sizes a,b] [--readers 1,4,8] [--paths p,q] [--reps N] [--json]`
// and the hidden `moerl bench weights-reader` (one reader process the benchmark starts).
#include <CLI/CLI.hpp>

#include <iomanip>
#include <iostream>

#include "bench/support.h"
#include "bench/weights/weights_bench.h"
#include "bench/weights/weights_bench_cache.h"
#include "bench/weights/weights_bench_publisher.h"
#include "bench/weights/weights_bench_pusher.h"
#include "bench/weights/weights_bench_reader.h"

namespace moerl::bench {

namespace {

void print_table(const nlohmann::json& r) {
  std::cout << "weights benchmark (load average at start " << r["load_average"]["start"].dump()
            << ")\n";
  std::cout << std::left << std::setw(16) << "path" << std::setw(6) << "via" << std::right
            << std::setw(8) << "readers" << std::setw(12) << "MiB" << std::setw(10) << "p50 s"
            << std::setw(10) << "p99 s" << std::setw(10) << "GB/s" << std::setw(12) << "x memcpy"
            << "\n";
  for (const auto& e : r["paths"])
    std::cout << std::left << std::setw(16) << e["path"].get<std::string>() << std::setw(6)
              << e["transport"].get<std::string>() << std::right << std::setw(8)
              << e["readers"].get<int>() << std::setw(12)
              << e["version_bytes"].get<int64_t>() / (1 << 20) << std::fixed << std::setprecision(3)
              << std::setw(10) << e["deliver_s"]["p50"].get<double>() << std::setw(10)
              << e["deliver_s"]["p99"].get<double>() << std::setw(10)
              << e["aggregate_gbps"].get<double>() << std::setw(12)
              << e["ratio_to_memcpy"].get<double>() << "\n";
  for (const auto& m : r["memcpy"])
    std::cout << "memcpy " << m["version_bytes"].get<int64_t>() / (1 << 20)
              << " MiB: " << std::fixed << std::setprecision(2) << m["gbps"].get<double>()
              << " GB/s\n";
  for (const auto& p : r["push"])
    std::cout << "push " << p["path"].get<std::string>() << " " << std::setw(6)
              << p["transport"].get<std::string>() << " "
              << p["version_bytes"].get<int64_t>() / (1 << 20) << " MiB: p50 " << std::fixed
              << std::setprecision(3) << p["put_s"]["p50"].get<double>() << " s, "
              << p["gbps"].get<double>() << " GB/s, x zmq " << p["ratio_to_zmq"].get<double>()
              << "\n";
  for (const auto& s : r["skipped"]) std::cout << "skipped: " << s.dump() << "\n";
}

}  // namespace

void add_weights_bench_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand(
      "weights", "time for N reader processes to hold one policy version: cache, store, S3");
  auto opt = std::make_shared<weights_bench_options>();
  auto config_file = std::make_shared<std::string>();
  auto overrides = std::make_shared<std::vector<std::string>>();
  auto as_json = std::make_shared<bool>(false);
  cmd->add_option("--sizes", opt->sizes, "version sizes in bytes")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 34));
  cmd->add_option("--readers", opt->readers, "reader process counts")
      ->delimiter(',')
      ->check(CLI::Range(1, 64));
  cmd->add_option("--paths", opt->paths,
                  "of cache_tcp, cache_ipc, cache_shm, fanout_tcp, cache_netns, fanout_netns, "
                  "store_local, store_s3, store_s3_netns, push_host, push_netns")
      ->delimiter(',');
  cmd->add_option("--fanout-degree", opt->fanout_degree,
                  "fanout_tcp: children per reader in the tree (1: a chain)")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--netns-link-mbit", opt->netns_link_mbit,
                  "netns paths: each host's egress rate in Mbit/s (0: unshaped)")
      ->check(CLI::Range(0, 1000000));
  cmd->add_option("--reps", opt->reps, "timed deliveries per combination")
      ->check(CLI::Range(1, 10000));
  cmd->add_option("--warmup", opt->warmup, "untimed deliveries first")->check(CLI::Range(0, 100));
  cmd->add_option("--s3-max-inflight-bytes", opt->s3_max_inflight_bytes,
                  "skip store_s3(_netns) combinations whose readers x bytes exceed this");
  cmd->add_option("--moerl-binary", opt->moerl_binary,
                  "binary that runs the reader processes (default: this one)");
  cmd->add_option("--moto-script", opt->moto_script, "moto S3 server script (store_s3*)");
  cmd->add_option("--config", *config_file, "YAML config file (weights.chunk_bytes, store.*)");
  cmd->add_option("--set", *overrides, "config override key=value (repeatable)");
  cmd->add_flag("--json", *as_json, "print the report as JSON");
  cmd->callback([=] {
    auto cfg = config::load(*config_file, *overrides);
    if (!cfg) {
      std::cerr << "moerl bench weights: " << cfg.err().to_string() << "\n";
      throw CLI::RuntimeError(2);
    }
    run_bench_command("weights", [&] {
      const nlohmann::json report = run_weights_bench(*opt, cfg.value());
      if (*as_json) {
        std::cout << report.dump(2) << "\n";
      } else {
        print_table(report);
      }
    });
  });

  // A reader process; started by the benchmark, not by hand (hidden: no group).
  auto* reader = bench.add_subcommand("weights-reader", "one reader of `moerl bench weights`");
  reader->group("");
  auto args = std::make_shared<weights_reader_args>();
  reader->add_option("--control", args->control, "the benchmark's control endpoint")->required();
  reader->add_option("--source", args->source, "cache, cache_shm, fanout or store")->required();
  reader->add_option("--at", args->at, "cache endpoint or store URL")->required();
  reader->add_option("--version", args->version, "policy version to read");
  reader->add_option("--degree", args->degree, "fanout: children per reader");
  reader->add_option("--bind", args->bind, "fanout: where this reader serves its peers");
  reader->add_option("--set", args->overrides, "config override key=value (repeatable)");
  reader->callback([=] {
    run_bench_command("weights-reader", [&] { need(run_weights_reader(*args), "reading"); });
  });

  // The netns paths' cache, on a host of its own; started by the benchmark (hidden).
  auto* cache = bench.add_subcommand("weights-cache", "the cache of `moerl bench weights` netns");
  cache->group("");
  auto cargs = std::make_shared<weights_cache_args>();
  cache->add_option("--bind", cargs->bind, "tcp://ADDR:PORT")->required();
  cache->add_option("--bytes", cargs->bytes, "version bytes")->required();
  cache->add_option("--versions", cargs->num_versions, "versions 1..N, the same bytes");
  cache->add_option("--chunk-bytes", cargs->chunk_bytes, "chunk bytes");
  cache->add_option("--ready", cargs->ready_file, "file written once bound")->required();
  cache->add_option("--fabric-puts", cargs->fabric_provider,
                    "take fabric puts through this provider");
  cache->callback([=] {
    run_bench_command("weights-cache", [&] { need(run_weights_cache(*cargs), "serving"); });
  });

  // The push paths' pusher, beside the cache or on a namespace of its own (hidden).
  auto* pusher = bench.add_subcommand("weights-pusher", "the pusher of `moerl bench weights`");
  pusher->group("");
  auto pargs = std::make_shared<weights_pusher_args>();
  pusher->add_option("--at", pargs->at, "the cache's endpoint")->required();
  pusher->add_option("--bytes", pargs->bytes, "version bytes")->required();
  pusher->add_option("--reps", pargs->reps, "timed puts each way");
  pusher->add_option("--warmup", pargs->warmup, "untimed puts each way first");
  pusher->add_option("--chunk-bytes", pargs->chunk_bytes, "ZeroMQ put chunk bytes");
  pusher->add_option("--provider", pargs->provider, "fabric provider");
  pusher->add_option("--out", pargs->out, "report file")->required();
  pusher->callback([=] {
    run_bench_command("weights-pusher", [&] { need(run_weights_pusher(*pargs), "pushing"); });
  });

  // store_s3_netns's publisher, beside moto on its namespace (hidden).
  auto* publisher =
      bench.add_subcommand("weights-publisher", "the S3 publisher of `moerl bench weights` netns");
  publisher->group("");
  auto uargs = std::make_shared<weights_publisher_args>();
  publisher->add_option("--url", uargs->url, "the store's URL")->required();
  publisher->add_option("--bytes", uargs->bytes, "version bytes")->required();
  publisher->add_option("--set", uargs->overrides, "config override key=value (repeatable)");
  publisher->add_option("--out", uargs->out, "report file")->required();
  publisher->callback([=] {
    run_bench_command("weights-publisher",
                      [&] { need(run_weights_publisher(*uargs), "publishing"); });
  });
}

}  // namespace moerl::bench
