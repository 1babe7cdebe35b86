// `moerl bench kernels`: times every kernels/ primitive on the anchors' prefill shape (4096
// tokens, hidden 7168, top-8 of 256 experts, DeepSeek-V3 routing) and decode shape (128
// tokens), beside the same run's memcpy bandwidth and one sgemm of the grouped FFN's FLOPs,
// and reports JSON with provenance.
#pragma once

#include <nlohmann/json.hpp>

namespace CLI {
class App;
}

namespace moerl::bench {

struct kernels_bench_options {
  int runs = 20;       // timed runs per primitive (p99 of fewer runs would be a single sample)
  int warmup = 2;      // untimed runs first
  int gemm_runs = 5;   // timed runs of the prefill-size GEMMs (FFN and its sgemm twin),
                       // which take seconds each on a small CPU; reported in the JSON
  int threads = 0;     // CPU pool size; 0: all hardware threads
  bool quick = false;  // shrink every shape ~8x: a smoke run, not a result
  bool cuda = false;   // time the CUDA twins instead of the CPU path (needs a GPU build)
};

// Runs the benchmark; throws std::runtime_error naming the failed primitive if a kernel
// returns an error (a benchmark of a failing kernel would be meaningless).
nlohmann::json run_kernels_bench(const kernels_bench_options& opt);

// Registers `kernels` under `moerl bench`.
void add_kernels_bench_command(CLI::App& bench);

}  // namespace moerl::bench
