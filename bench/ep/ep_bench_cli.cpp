#include <iostream>
#include <stdexcept>

#include <CLI/CLI.hpp>

#include "bench/ep/ep_bench.h"
#include "bench/support.h"

namespace moerl::bench {
namespace {

void print_table(const nlohmann::json& r) {
  std::cout << "ep bench: provider " << r["provider"].get<std::string>() << ", " << r["ranks"]
            << " ranks, shape " << r["shape"]["name"].get<std::string>() << ", raw RMA "
            << r["raw_rma_gbps"] << " GB/s, raw same-host copy " << r["raw_host_copy_gbps"]
            << " GB/s, memcpy " << r["memcpy_gbps"] << " GB/s\n";
  for (const auto& m : r["modes"])
    std::cout << "  " << m["mode"].get<std::string>() << ": check " << m["check"].get<std::string>()
              << ", dispatch p50 " << m["dispatch_us"]["p50"] << " us, combine p50 "
              << m["combine_us"]["p50"] << " us, total p50 " << m["total_us"]["p50"]
              << " us, dispatch " << m["dispatch_gbps"] << " GB/s (logical)\n";
}

}  // namespace

void add_ep_bench_command(CLI::App& bench) {
  auto* cmd =
      bench.add_subcommand("ep", "EP dispatch/combine (normal, ll, baseline) over libfabric");
  static ep_bench_options opt;
  static bool as_json = false;
  static std::string modes = "normal,ll,baseline";
  cmd->add_option("--provider", opt.provider, "libfabric provider: shm | tcp");
  cmd->add_option("--ranks", opt.ranks, "ranks (processes) to launch; must divide 256")
      ->check(CLI::Range(2, 256));
  cmd->add_option("--mode", modes, "comma-separated modes: normal, ll, baseline");
  cmd->add_option("--shape", opt.shape, "decode (128 tokens/rank) | prefill (4096 tokens/rank)");
  cmd->add_option("--routing", opt.routing, "zipf | uniform expert popularity");
  cmd->add_flag("--reorder", opt.reorder, "route writes through the reorder/delay/split shim");
  cmd->add_option("--starts", opt.starts, "process starts (>= 5 for a result)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--iterations", opt.iterations,
                  "timed iterations per start and mode (0: 20 decode, 4 prefill)")
      ->check(CLI::Range(0, 100000));
  cmd->add_option("--warmup", opt.warmup, "untimed iterations per start and mode")
      ->check(CLI::Range(0, 1000));
  cmd->add_option("--hidden", opt.hidden,
                  "hidden size (7168; smaller only if memory forbids, stated in the output)")
      ->check(CLI::Range(int64_t(3), int64_t(1) << 20));
  cmd->add_option("--chunk-bytes", opt.chunk_bytes, "bulk write size of normal/baseline modes")
      ->check(CLI::Range(size_t(4096), size_t(1) << 30));
  cmd->add_option(
         "--ll-entries-per-write", opt.ll_entries_per_write,
         "low-latency mode: adjacent slots one write may fill (1: one write per (token, expert))")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  cmd->add_option(
      "--paths", opt.paths,
      "auto (same host: shared memory, other hosts: libfabric) | fabric (all libfabric)");
  cmd->add_option("--peer", opt.peer,
                  "generic all-to-all run on the same exchange: mpi (MPI_Alltoallv) | none");
  cmd->add_option("--io-buffers", opt.io_buffers,
                  "where tokens and expert outputs live: group (the group's buffers; "
                  "low-latency reads them in place on one host) | own (copied to the peers)")
      ->check(CLI::IsMember({"group", "own"}));
  cmd->add_option("--ll-memory", opt.ll_memory,
                  "low-latency mode's memory: host (its layout) | host_split (the device "
                  "path's split layout and batched copies, on host memory)")
      ->check(CLI::IsMember({"host", "host_split"}));
  cmd->add_option("--normal-memory", opt.normal_memory,
                  "normal mode's memory: host (its layout) | host_split (the device path's split "
                  "layout and batched copies, on host memory)")
      ->check(CLI::IsMember({"host", "host_split"}));
  cmd->add_flag("--json", as_json, "print the report as JSON");
  cmd->callback([] {
    opt.modes.clear();
    std::string cur;
    for (char c : modes + ",") {
      if (c == ',') {
        if (!cur.empty()) opt.modes.push_back(cur);
        cur.clear();
      } else {
        cur += c;
      }
    }
    run_bench_command("ep", [] {
      const nlohmann::json report = run_ep_bench(opt);
      if (as_json)
        std::cout << report.dump(2) << "\n";
      else
        print_table(report);
    });
  });
}

}  // namespace moerl::bench
