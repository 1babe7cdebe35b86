// CUDA twins of kernels/cpu/combine.cpp. Forward: one block per token, each thread owns
// whole output elements and sums k = 0..topk-1 in order, so results are bitwise reproducible
// run to run (fused multiply-add is disabled for that sum, matching the CPU's rounding).
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/internal/validate.h"

namespace moerl::kernels::cuda {

using kernels::detail::check_row_shape;

namespace {

template <class T>
__global__ void combine_forward_kernel(const T* y, const int64_t* slot, const float* w, int K,
                                       int64_t H, T* out) {
  const int64_t t = blockIdx.x;
  for (int64_t j = threadIdx.x; j < H; j += blockDim.x) {
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) {
      const int64_t s = slot[t * K + k];
      if (s >= 0) acc = __fadd_rn(acc, __fmul_rn(w[t * K + k], detail::to_f32(y[s * H + j])));
    }
    detail::store(out + t * H + j, acc);
  }
}

// The fp32 forward with float4 loads and stores when rows are 16-byte aligned: each lane
// keeps the same k-ordered, explicitly rounded sum as combine_forward_kernel.
__global__ void combine_forward_f4_kernel(const float4* y, const int64_t* slot, const float* w,
                                          int K, int64_t row_vecs, float4* out) {
  const int64_t t = blockIdx.x;
  for (int64_t j = threadIdx.x; j < row_vecs; j += blockDim.x) {
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int k = 0; k < K; ++k) {
      const int64_t s = slot[t * K + k];
      if (s < 0) continue;
      const float wk = w[t * K + k];
      const float4 v = y[s * row_vecs + j];
      acc.x = __fadd_rn(acc.x, __fmul_rn(wk, v.x));
      acc.y = __fadd_rn(acc.y, __fmul_rn(wk, v.y));
      acc.z = __fadd_rn(acc.z, __fmul_rn(wk, v.z));
      acc.w = __fadd_rn(acc.w, __fmul_rn(wk, v.w));
    }
    out[t * row_vecs + j] = acc;
  }
}

template <class T>
__global__ void scale_rows_kernel(const int64_t* row_entry, int K, const float* w, const T* gout,
                                  int64_t H, T* gy) {
  const int64_t r = blockIdx.x;
  const int64_t entry = row_entry[r];
  for (int64_t j = threadIdx.x; j < H; j += blockDim.x)
    detail::store(gy + r * H + j,
                  entry >= 0 ? w[entry] * detail::to_f32(gout[(entry / K) * H + j]) : 0.0f);
}

// One block (256 threads) per entry; a fixed tree reduction keeps the order reproducible.
template <class T>
__global__ void grad_weight_kernel(const T* gout, const T* y, const int64_t* slot, int K, int64_t H,
                                   float* gw) {
  __shared__ float part[256];
  const int64_t i = blockIdx.x;
  const int64_t s = slot[i];
  float acc = 0.0f;
  if (s >= 0)
    for (int64_t j = threadIdx.x; j < H; j += blockDim.x)
      acc += detail::to_f32(gout[(i / K) * H + j]) * detail::to_f32(y[s * H + j]);
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int stride = 128; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) part[threadIdx.x] += part[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) gw[i] = s >= 0 ? part[0] : 0.0f;
}

template <class T>
status combine_fwd(cudaStream_t stream, const T* y, const int64_t* slot, const float* w,
                   int64_t num_tokens, int K, int64_t H, int64_t rows, T* out) {
  STATUS_TRY(check_row_shape("cuda::combine_forward", num_tokens, K, H, rows));
  if (num_tokens == 0) return ok_status();
  if constexpr (std::is_same_v<T, float>) {
    if (H % 4 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0 &&
        reinterpret_cast<uintptr_t>(out) % 16 == 0) {
      combine_forward_f4_kernel<<<static_cast<unsigned>(num_tokens), 256, 0, stream>>>(
          reinterpret_cast<const float4*>(y), slot, w, K, H / 4, reinterpret_cast<float4*>(out));
      CUDA_CHECK_LAUNCH();
      return ok_status();
    }
  }
  combine_forward_kernel<<<static_cast<unsigned>(num_tokens), 256, 0, stream>>>(y, slot, w, K, H,
                                                                                out);
  CUDA_CHECK_LAUNCH();
  return ok_status();
}

// The same sum with each term given as a row pointer (nullptr: no term): fabric's
// low-latency combine on device memory, whose terms lie in several buffers.
template <class T>
__global__ void combine_rows_forward_kernel(const T* const* rows, const float* w, int K, int64_t H,
                                            T* out) {
  const int64_t t = blockIdx.x;
  for (int64_t j = threadIdx.x; j < H; j += blockDim.x) {
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) {
      const T* r = rows[t * K + k];
      if (r) acc = __fadd_rn(acc, __fmul_rn(w[t * K + k], detail::to_f32(r[j])));
    }
    detail::store(out + t * H + j, acc);
  }
}

template <class T>
status combine_rows_fwd(cudaStream_t stream, const T* const* rows, const float* w,
                        int64_t num_tokens, int width, int64_t hidden, T* out) {
  STATUS_TRY(check_row_shape("cuda::combine_rows_forward", num_tokens, width, hidden, 0));
  if (num_tokens == 0) return ok_status();
  KERNELS_REQUIRE(rows && w && out, "cuda::combine_rows_forward", "null input");
  combine_rows_forward_kernel<<<static_cast<unsigned>(num_tokens), 256, 0, stream>>>(rows, w, width,
                                                                                     hidden, out);
  CUDA_CHECK_LAUNCH();
  return ok_status();
}

}  // namespace

status combine_rows_forward(cudaStream_t stream, const float* const* term_rows,
                            const float* weights, int64_t num_tokens, int width, int64_t hidden,
                            float* out) {
  return combine_rows_fwd(stream, term_rows, weights, num_tokens, width, hidden, out);
}
status combine_rows_forward(cudaStream_t stream, const bf16* const* term_rows, const float* weights,
                            int64_t num_tokens, int width, int64_t hidden, bf16* out) {
  return combine_rows_fwd(stream, term_rows, weights, num_tokens, width, hidden, out);
}

status combine_forward(cudaStream_t stream, const float* expert_out, const int64_t* slot,
                       const float* w, int64_t num_tokens, int topk, int64_t hidden,
                       int64_t num_rows, float* out) {
  return combine_fwd(stream, expert_out, slot, w, num_tokens, topk, hidden, num_rows, out);
}
status combine_forward(cudaStream_t stream, const bf16* expert_out, const int64_t* slot,
                       const float* w, int64_t num_tokens, int topk, int64_t hidden,
                       int64_t num_rows, bf16* out) {
  return combine_fwd(stream, expert_out, slot, w, num_tokens, topk, hidden, num_rows, out);
}

namespace {

template <class T>
status combine_bwd(cudaStream_t stream, const T* grad_out, const T* expert_out, const int64_t* slot,
                   const float* w, int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows,
                   T* grad_expert_out, float* grad_topk_weights) {
  STATUS_TRY(check_row_shape("cuda::combine_backward", num_tokens, topk, hidden, num_rows));
  if (num_rows > 0) {
    detail::scratch<int64_t> row_entry(stream, num_rows);
    CUDA_CHECK(row_entry.error());
    STATUS_TRY(detail::build_row_entry(stream, slot, num_tokens * topk, num_rows, row_entry.get()));
    scale_rows_kernel<<<static_cast<unsigned>(num_rows), 256, 0, stream>>>(
        row_entry.get(), topk, w, grad_out, hidden, grad_expert_out);
    CUDA_CHECK_LAUNCH();
  }
  if (num_tokens > 0) {
    grad_weight_kernel<<<static_cast<unsigned>(num_tokens * topk), 256, 0, stream>>>(
        grad_out, expert_out, slot, topk, hidden, grad_topk_weights);
    CUDA_CHECK_LAUNCH();
  }
  return ok_status();
}

}  // namespace

status combine_backward(cudaStream_t stream, const float* grad_out, const float* expert_out,
                        const int64_t* slot, const float* w, int64_t num_tokens, int topk,
                        int64_t hidden, int64_t num_rows, float* grad_expert_out,
                        float* grad_topk_weights) {
  return combine_bwd(stream, grad_out, expert_out, slot, w, num_tokens, topk, hidden, num_rows,
                     grad_expert_out, grad_topk_weights);
}
status combine_backward(cudaStream_t stream, const bf16* grad_out, const bf16* expert_out,
                        const int64_t* slot, const float* w, int64_t num_tokens, int topk,
                        int64_t hidden, int64_t num_rows, bf16* grad_expert_out,
                        float* grad_topk_weights) {
  return combine_bwd(stream, grad_out, expert_out, slot, w, num_tokens, topk, hidden, num_rows,
                     grad_expert_out, grad_topk_weights);
}

}  // namespace moerl::kernels::cuda
