// `moerl bench job-ep`: what expert parallelism costs or gains inside the GRPO job on this
// host: seconds per prompt group generated (G rows, the task's completion length) and per
// GRPO trainer step (one iteration's samples), single-rank vs EP rank threads over fabric.
#pragma once

#include <CLI/CLI.hpp>

namespace moerl::bench {

void add_job_ep_bench_command(CLI::App& bench);

}  // namespace moerl::bench
