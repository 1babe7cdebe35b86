// The CUDA runner of `moerl bench kernels --cuda`: the same shapes and JSON as the CPU
// runner, timing the CUDA twins with CUDA events. In a build without CUDA it throws a
// runtime_error saying so.
#pragma once

#include <nlohmann/json.hpp>

#include "bench/kernels/bench_shapes.h"
#include "bench/kernels/kernels_bench.h"

namespace moerl::bench {

nlohmann::json run_kernels_bench_cuda(const kernels_bench_options& opt, const bench_shapes& shapes);

}  // namespace moerl::bench
