// `moerl bench policy`: the cost of one policy iteration's compute on this machine, for the
// configured policy and batch (grpo.prompts_per_iteration x grpo.group_size samples of
// task.name): rollout (autoregressive generation through the expert exchange, KV-cached),
// reward scoring, and a training step (GRPO forward + backward + Adam). Per phase:
// p50/p99/mean/stddev/min/max milliseconds over repetitions and tokens per second; expert
// load imbalance; the effective config and provenance.
#pragma once

#include <nlohmann/json.hpp>

#include "common/config.h"

namespace CLI {
class App;
}

namespace moerl::bench {

struct policy_bench_options {
  int reps = 10;   // timed repetitions per phase
  int warmup = 2;  // untimed repetitions first
};

// Throws std::runtime_error naming the failed step (a benchmark of failing calls is void).
nlohmann::json run_policy_bench(const policy_bench_options& opt, const config& cfg);

// Registers `policy` under `moerl bench`.
void add_policy_bench_command(CLI::App& bench);

}  // namespace moerl::bench
