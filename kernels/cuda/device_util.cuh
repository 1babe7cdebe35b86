// Device helpers shared by the CUDA twins: kernels/cuda's and policy/cuda's (the policy's dense
// ops; policy sits above kernels). Not for code outside the twins. Conversions use the same
// bit recipes as kernels/dtypes.h so CPU and GPU round identically.
#pragma once

#include <cstdint>

#include "kernels/cuda/cublas_check.h"
#include "kernels/dtypes.h"

namespace moerl::kernels::cuda::detail {

__device__ __forceinline__ float bf16_to_f32(bf16 v) {
  return __uint_as_float(static_cast<uint32_t>(v.bits) << 16);
}
__device__ __forceinline__ bf16 f32_to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>(u >> 16)};
}
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(bf16 v) { return bf16_to_f32(v); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(bf16* p, float v) { *p = f32_to_bf16(v); }

// Grid-stride helper: number of blocks for n items at `threads` per block, capped.
inline unsigned blocks_for(int64_t n, int threads, int64_t cap = 65535) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  return static_cast<unsigned>(b < cap ? b : cap);
}

// row_entry[r] = the entry t * topk + k whose slot is r, or -1 for a padding row (the CPU's
// invert_slots without validation: slots must be unique and in range).
status build_row_entry(cudaStream_t stream, const int64_t* slot, int64_t num_entries,
                       int64_t num_rows, int64_t* row_entry);

// Stream-ordered scratch memory, freed on the same stream when it goes out of scope.
template <class T>
class scratch {
 public:
  scratch(cudaStream_t stream, int64_t n) : stream_(stream) {
    if (n > 0) err_ = cudaMallocAsync(reinterpret_cast<void**>(&p_), n * sizeof(T), stream);
  }
  ~scratch() {
    if (p_) cudaFreeAsync(p_, stream_);
  }
  scratch(const scratch&) = delete;
  scratch& operator=(const scratch&) = delete;
  T* get() const { return p_; }
  cudaError_t error() const { return err_; }

 private:
  cudaStream_t stream_;
  T* p_ = nullptr;
  cudaError_t err_ = cudaSuccess;
};

// The cuBLAS handle of the calling thread, bound to `stream`.
status cublas_handle(cudaStream_t stream, cublasHandle_t* out);

// Row-major C[M,N] = alpha op(A) op(B) + beta C as cblas_sgemm(CblasRowMajor, ...) computes
// it, expressed in cuBLAS's column-major terms by swapping the operands (full fp32: the
// handle keeps cuBLAS's default math mode, no TF32).
status rm_sgemm(cublasHandle_t h, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc);

}  // namespace moerl::kernels::cuda::detail
