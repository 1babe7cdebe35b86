// CUDA twin of the FP8 helpers in kernels/cpu/dtypes.cpp: one 128-thread block per (row,
// scale block), the same amax/448 scale and the same e4m3 bit recipe as the CPU.
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/internal/validate.h"

namespace moerl::kernels::cuda {

namespace {

__device__ uint8_t encode_e4m3(float v) {
  uint32_t u = __float_as_uint(v);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return sign | 0x7fu;
  const float a = __uint_as_float(u);
  if (a < 0.015625f) return sign | static_cast<uint8_t>(rintf(a * 512.0f));
  u += 0x7ffffu + ((u >> 20) & 1u);
  const int exp = static_cast<int>((u >> 23) & 0xffu) - 127;
  const uint32_t man = (u >> 20) & 7u;
  if (exp > 8 || (exp == 8 && man == 7)) return sign | 0x7eu;
  return sign | static_cast<uint8_t>(((exp + 7) << 3) | man);
}

__device__ float decode_e4m3(uint8_t bits) {
  const float sign = (bits & 0x80u) ? -1.0f : 1.0f;
  const int exp = (bits >> 3) & 0xf, man = bits & 7;
  if (exp == 0xf && man == 7) return __uint_as_float(0x7fc00000u);
  if (exp == 0) return sign * ldexpf(static_cast<float>(man), -9);
  return sign * ldexpf(1.0f + man / 8.0f, exp - 7);
}

__global__ void quantize_kernel(const float* x, int64_t H, int64_t nb, uint8_t* q, float* scales) {
  __shared__ float amax[128];
  const int64_t row = blockIdx.x / nb, blk = blockIdx.x % nb;
  const int64_t j = blk * 128 + threadIdx.x;
  const float v = j < H ? x[row * H + j] : 0.0f;
  amax[threadIdx.x] = fabsf(v);
  __syncthreads();
  for (int s = 64; s > 0; s >>= 1) {
    if (threadIdx.x < s) amax[threadIdx.x] = fmaxf(amax[threadIdx.x], amax[threadIdx.x + s]);
    __syncthreads();
  }
  const float scale = amax[0] > 0.0f ? amax[0] / fp8_e4m3_max : 1.0f;
  if (threadIdx.x == 0) scales[blockIdx.x] = scale;
  if (j < H) q[row * H + j] = encode_e4m3(__fdiv_rn(v, scale));
}

__global__ void dequantize_kernel(const uint8_t* q, const float* scales, int64_t R, int64_t H,
                                  int64_t nb, float* x) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < R * H;
       i += int64_t(gridDim.x) * blockDim.x)
    x[i] = decode_e4m3(q[i]) * scales[(i / H) * nb + (i % H) / 128];
}

}  // namespace

status fp8_quantize(cudaStream_t stream, const float* x, int64_t num_rows, int64_t hidden,
                    uint8_t* q, float* scales) {
  KERNELS_REQUIRE(num_rows >= 0 && hidden > 0, "cuda::fp8_quantize",
                  "bad shape num_rows = ", num_rows, ", hidden = ", hidden);
  const int64_t nb = fp8_num_blocks(hidden);
  if (num_rows == 0) return ok_status();
  quantize_kernel<<<static_cast<unsigned>(num_rows * nb), 128, 0, stream>>>(x, hidden, nb, q,
                                                                            scales);
  CUDA_CHECK_LAUNCH();
  return ok_status();
}

status fp8_dequantize(cudaStream_t stream, const uint8_t* q, const float* scales, int64_t num_rows,
                      int64_t hidden, float* x) {
  KERNELS_REQUIRE(num_rows >= 0 && hidden > 0, "cuda::fp8_dequantize",
                  "bad shape num_rows = ", num_rows, ", hidden = ", hidden);
  if (num_rows == 0) return ok_status();
  dequantize_kernel<<<detail::blocks_for(num_rows * hidden, 256), 256, 0, stream>>>(
      q, scales, num_rows, hidden, fp8_num_blocks(hidden), x);
  CUDA_CHECK_LAUNCH();
  return ok_status();
}

}  // namespace moerl::kernels::cuda
