// Compiled instead of cuda_bench.cu when the build has no CUDA compiler.
#include <stdexcept>

#include "bench/kernels/cuda_bench.h"

namespace moerl::bench {

nlohmann::json run_kernels_bench_cuda(const kernels_bench_options&, const bench_shapes&) {
  throw std::runtime_error(
      "--cuda: this moerl was built without CUDA (MOERL_HAVE_CUDA=OFF); rebuild where nvcc exists");
}

}  // namespace moerl::bench
