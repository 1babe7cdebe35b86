// `moerl bench ledger`: what the accounting core costs, measured in one process.
//  - lease_cycle: acquire -> report -> shard ack -> consumed on an in-memory ledger
//    (units/s and the acquire latency p50/p99);
//  - journaled: the same cycle with a sync() to the local-directory store after every
//    unit, with and without fsync;
//  - recovery: time to rebuild a ledger from its journal;
//  - sample_plane: samples/s producer -> shard -> trainer over ZeroMQ on loopback with
//    credit flow control, and the shard's peak residency against its capacity;
//  - coordinator_tick: the ledger queries of the coordinator's tick against ledger size.
// Prints JSON with provenance. Not a test: no thresholds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace CLI {
class App;
}

namespace moerl::bench {

struct ledger_bench_options {
  int units = 20000;          // units through the in-memory lease cycle
  int journaled_units = 500;  // units through the journaled cycle (each one sync)
  int samples = 100000;       // samples through the sample plane
  int runs = 3;               // repetitions of each measurement (variance is reported)
  std::vector<int> tick_units = {10000, 100000};  // ledger sizes for the coordinator's tick
  std::string scratch;  // directory for the store (default: a fresh temp dir)
};

// Throws std::runtime_error naming the step that failed.
nlohmann::json run_ledger_bench(const ledger_bench_options& opt);

// Registers `ledger` under `moerl bench`.
void add_ledger_bench_command(CLI::App& bench);

}  // namespace moerl::bench
