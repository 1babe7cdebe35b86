// `moerl bench ep`: times dispatch, combine and dispatch+combine of the EP modes on the
// decode (128 tokens per rank) or prefill (4096 tokens per rank) shape, hidden 7168, top-8
// of 256 experts, bf16, with ranks it launches itself as processes (>= 5 process starts).
// Reports, per mode, p50/p99 latencies over iterations taken as the slowest rank of each
// iteration, bandwidth with each numerator named, a correctness check on its own data,
// and the same run's raw RMA-write and memcpy bandwidth; JSON with provenance.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace CLI {
class App;
}

namespace moerl::bench {

struct ep_bench_options {
  std::string provider = "shm";  // shm | tcp
  int ranks = 4;
  std::vector<std::string> modes = {"normal", "ll", "baseline"};
  std::string shape = "decode";  // decode | prefill
  std::string routing = "zipf";  // zipf | uniform
  bool reorder = false;          // route writes through the reorder shim
  int starts = 5;                // process starts (each: fresh ranks, fresh groups)
  int iterations = 0;            // timed iterations per start and mode; 0: 20 decode, 4 prefill
  int warmup = 2;                // untimed iterations first
  int64_t hidden = 7168;
  size_t chunk_bytes = 1 << 20;
  int64_t ll_entries_per_write = 1;  // 1: one write per (token, expert), as DeepEP LL
  int64_t op_timeout_ms = 60000;
  std::string paths = "auto";  // auto: a transport per distance; fabric: all through libfabric
  std::string peer = "mpi";    // mpi: run MPI_Alltoallv on the same exchange; none: skip it
  // Where the tokens come from and the identity experts write their outputs: group (the
  // group's dispatch_buffer() and combine_buffer(), which low-latency peers on one host read
  // in place) | own (memory of the rank's own: every mode copies the rows to the peers, as
  // before reading in place).
  std::string io_buffers = "group";
  // Low-latency mode's memory: host (its interleaved layout) | host_split (the device path's
  // split layout and batched copies on host memory: what that logic costs on a CPU;
  // fabric/DEVICE_MEMORY.md). The bench's tokens are host memory, so no cuda.
  std::string ll_memory = "host";
  // Normal mode's memory, the same choice (its split layout: fabric/DEVICE_MEMORY.md).
  std::string normal_memory = "host";
};

// Runs the benchmark; throws std::runtime_error naming what failed (a rank that exited
// non-zero, an EP error).
nlohmann::json run_ep_bench(const ep_bench_options& opt);

// Registers `ep` under `moerl bench`.
void add_ep_bench_command(CLI::App& bench);

}  // namespace moerl::bench
