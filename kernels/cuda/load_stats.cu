// CUDA twin of kernels/cpu/load_stats.cpp. Counts use integer atomics (exact in any order);
// the probability sums run one thread per expert in token order, in double as on the CPU.
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/internal/validate.h"

namespace moerl::kernels::cuda {

namespace {

__global__ void count_kernel(const int64_t* idx, int64_t n, int E, unsigned long long* counts) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = idx[i];
    if (e >= 0 && e < E) atomicAdd(&counts[e], 1ull);
  }
}

__global__ void copy_counts(const unsigned long long* c, int E, int64_t* out) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e < E) out[e] = static_cast<int64_t>(c[e]);
}

__global__ void routed_kernel(const int64_t* idx, int64_t T, int K, uint8_t* routed) {
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t >= T) return;
  uint8_t r = 0;
  for (int k = 0; k < K; ++k) r |= idx[t * K + k] >= 0;
  routed[t] = r;
}

// One thread per expert, tokens in order: the CPU's fixed summation order.
__global__ void prob_sum_kernel(const float* scores, const uint8_t* routed, int64_t T, int E,
                                double* prob_sum) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= E) return;
  double acc = 0.0;
  for (int64_t t = 0; t < T; ++t)
    if (routed[t]) acc += scores[t * E + e];
  prob_sum[e] = acc;
}

// Single thread: N, the loss and the per-expert gradient, in the CPU's order.
__global__ void loss_kernel(const unsigned long long* counts, const double* prob_sum,
                            const uint8_t* routed, int64_t T, int E, int K, float coeff,
                            float* loss, float* grad_per_expert) {
  int64_t n_routed = 0;
  for (int64_t t = 0; t < T; ++t) n_routed += routed[t];
  if (n_routed == 0) {
    *loss = 0.0f;
    for (int e = 0; e < E; ++e) grad_per_expert[e] = 0.0f;
    return;
  }
  const double n = static_cast<double>(n_routed);
  double acc = 0.0;
  for (int e = 0; e < E; ++e) {
    const double f = static_cast<double>(counts[e]) / (n * K);
    // Explicit rounding steps: nvcc would otherwise fuse this into an FMA the CPU never does.
    acc = __dadd_rn(acc, __dmul_rn(f, prob_sum[e] / n));
    grad_per_expert[e] = static_cast<float>(coeff * E * f / n);
  }
  *loss = static_cast<float>(coeff * E * acc);
}

__global__ void fill_grad_kernel(const float* grad_per_expert, const uint8_t* routed, int64_t T,
                                 int E, float* grad) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < T * E;
       i += int64_t(gridDim.x) * blockDim.x)
    grad[i] = routed[i / E] ? grad_per_expert[i % E] : 0.0f;
}

}  // namespace

status count_tokens_per_expert(cudaStream_t stream, const int64_t* topk_idx, int64_t num_tokens,
                               int topk, int num_experts, int64_t* tokens_per_expert) {
  KERNELS_REQUIRE(num_tokens >= 0 && topk >= 1 && num_experts >= 1, "cuda::count_tokens_per_expert",
                  "bad shape num_tokens = ", num_tokens, ", topk = ", topk,
                  ", num_experts = ", num_experts);
  detail::scratch<unsigned long long> counts(stream, num_experts);
  CUDA_CHECK(counts.error());
  CUDA_CHECK(cudaMemsetAsync(counts.get(), 0, num_experts * sizeof(unsigned long long), stream));
  if (num_tokens > 0) {
    count_kernel<<<detail::blocks_for(num_tokens * topk, 256), 256, 0, stream>>>(
        topk_idx, num_tokens * topk, num_experts, counts.get());
    CUDA_CHECK_LAUNCH();
  }
  copy_counts<<<detail::blocks_for(num_experts, 256), 256, 0, stream>>>(counts.get(), num_experts,
                                                                        tokens_per_expert);
  CUDA_CHECK_LAUNCH();
  return ok_status();
}

status load_balance_loss(cudaStream_t stream, const float* scores, const int64_t* topk_idx,
                         int64_t num_tokens, int num_experts, int topk, float coeff, float* loss,
                         float* grad_scores) {
  KERNELS_REQUIRE(num_tokens >= 0 && topk >= 1 && num_experts >= 1, "cuda::load_balance_loss",
                  "bad shape num_tokens = ", num_tokens, ", topk = ", topk,
                  ", num_experts = ", num_experts);
  const int E = num_experts;
  detail::scratch<unsigned long long> counts(stream, E);
  detail::scratch<double> prob_sum(stream, E);
  detail::scratch<float> grad_e(stream, E);
  detail::scratch<uint8_t> routed(stream, num_tokens > 0 ? num_tokens : 1);
  CUDA_CHECK(counts.error());
  CUDA_CHECK(prob_sum.error());
  CUDA_CHECK(grad_e.error());
  CUDA_CHECK(routed.error());
  CUDA_CHECK(cudaMemsetAsync(counts.get(), 0, E * sizeof(unsigned long long), stream));
  if (num_tokens > 0) {
    count_kernel<<<detail::blocks_for(num_tokens * topk, 256), 256, 0, stream>>>(
        topk_idx, num_tokens * topk, E, counts.get());
    CUDA_CHECK_LAUNCH();
    routed_kernel<<<detail::blocks_for(num_tokens, 256, INT32_MAX), 256, 0, stream>>>(
        topk_idx, num_tokens, topk, routed.get());
    CUDA_CHECK_LAUNCH();
  }
  prob_sum_kernel<<<detail::blocks_for(E, 128), 128, 0, stream>>>(scores, routed.get(), num_tokens,
                                                                  E, prob_sum.get());
  CUDA_CHECK_LAUNCH();
  loss_kernel<<<1, 1, 0, stream>>>(counts.get(), prob_sum.get(), routed.get(), num_tokens, E, topk,
                                   coeff, loss, grad_e.get());
  CUDA_CHECK_LAUNCH();
  if (grad_scores && num_tokens > 0) {
    fill_grad_kernel<<<detail::blocks_for(num_tokens * E, 256), 256, 0, stream>>>(
        grad_e.get(), routed.get(), num_tokens, E, grad_scores);
    CUDA_CHECK_LAUNCH();
  }
  return ok_status();
}

}  // namespace moerl::kernels::cuda
