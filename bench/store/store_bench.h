// `moerl bench store`: times put, get, list and remove on the configured object store for
// a range of object sizes, so checkpoint and weight-publication costs can be budgeted.
// Reports per operation and size: p50/p99/mean/stddev/min/max latency and MB/s (and the
// same for a whole checkpoint: write, verify-and-find, read), with the
// store's description, the effective store.* config and the provenance.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/config.h"

namespace CLI {
class App;
}

namespace moerl::bench {

struct store_bench_options {
  // Empty: store.url when the config sets it, else a fresh temporary directory (removed).
  std::string url;
  std::vector<int64_t> sizes = {4096, 1 << 20, 16 << 20};  // bytes per object
  int reps = 10;                                           // timed objects per size
  int warmup = 1;                                          // untimed put/get pairs per size first
  // A checkpoint of this many bytes in checkpoint_parts parts is written, found by
  // latest_committed (which re-reads and hashes every part) and read back, checkpoint_reps
  // times; 0 bytes skips it.
  int64_t checkpoint_bytes = 64ll << 20;
  int checkpoint_parts = 8;
  int checkpoint_reps = 3;
};

// Runs the benchmark under a fresh key prefix and removes what it wrote. Throws
// std::runtime_error naming the failed operation (a benchmark of failing calls is void).
nlohmann::json run_store_bench(const store_bench_options& opt, const config& cfg);

// Registers `store` under `moerl bench`.
void add_store_bench_command(CLI::App& bench);

}  // namespace moerl::bench
