// CUDA twins of the bulk bf16 conversions in kernels/cpu/dtypes.cpp (same rounding bits).
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/internal/validate.h"

namespace moerl::kernels::cuda {

namespace {

__global__ void to_bf16_kernel(const float* x, int64_t n, bf16* y) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = detail::f32_to_bf16(x[i]);
}

__global__ void from_bf16_kernel(const bf16* x, int64_t n, float* y) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = detail::bf16_to_f32(x[i]);
}

}  // namespace

status bf16_from_float(cudaStream_t stream, const float* x, int64_t n, bf16* y) {
  KERNELS_REQUIRE(n >= 0, "cuda::bf16_from_float", "n = ", n, " is negative");
  if (n == 0) return ok_status();
  to_bf16_kernel<<<detail::blocks_for(n, 256), 256, 0, stream>>>(x, n, y);
  CUDA_CHECK_LAUNCH();
  return ok_status();
}

status bf16_to_float(cudaStream_t stream, const bf16* x, int64_t n, float* y) {
  KERNELS_REQUIRE(n >= 0, "cuda::bf16_to_float", "n = ", n, " is negative");
  if (n == 0) return ok_status();
  from_bf16_kernel<<<detail::blocks_for(n, 256), 256, 0, stream>>>(x, n, y);
  CUDA_CHECK_LAUNCH();
  return ok_status();
}

}  // namespace moerl::kernels::cuda
