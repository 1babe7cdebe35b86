// CUDA twin of kernels/cpu/expert_ffn.cpp: the same per-expert GEMM sequence through cuBLAS
// (full fp32, no TF32), with the SwiGLU activation and its derivative as elementwise kernels.
#include <algorithm>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/internal/validate.h"

namespace moerl::kernels::cuda {

using detail::rm_sgemm;
using kernels::detail::check_expert_ffn_shape;

namespace {

__device__ __forceinline__ float sigmoidf(float v) { return 1.0f / (1.0f + expf(-v)); }

__global__ void swiglu_kernel(const float* h, int64_t m, int64_t F, float* a) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < m * F;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / F, j = i % F;
    const float g = h[r * 2 * F + j], u = h[r * 2 * F + F + j];
    a[i] = g * sigmoidf(g) * u;
  }
}

__global__ void swiglu_backward_kernel(const float* h, const float* ga, int64_t m, int64_t F,
                                       float* gh) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < m * F;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / F, j = i % F;
    const float g = h[r * 2 * F + j], u = h[r * 2 * F + F + j];
    const float sg = sigmoidf(g);
    gh[r * 2 * F + j] = ga[i] * u * sg * (1.0f + g * (1.0f - sg));
    gh[r * 2 * F + F + j] = ga[i] * g * sg;
  }
}

}  // namespace

status expert_ffn_forward(cudaStream_t stream, const expert_ffn_shape& s,
                          const int64_t* expert_offset, const float* x, const float* w_gate_up,
                          const float* w_down, float* gate_up, float* act, float* out) {
  STATUS_TRY(check_expert_ffn_shape("cuda::expert_ffn_forward", s, expert_offset));
  cublasHandle_t h;
  STATUS_TRY(detail::cublas_handle(stream, &h));
  const int H = static_cast<int>(s.hidden), F = static_cast<int>(s.ffn_dim);
  for (int e = 0; e < s.num_experts; ++e) {
    const int64_t r0 = expert_offset[e];
    const int m = static_cast<int>(expert_offset[e + 1] - r0);
    if (m == 0) continue;
    const float* wgu = w_gate_up + int64_t(e) * 2 * F * H;
    const float* wd = w_down + int64_t(e) * H * F;
    STATUS_TRY(rm_sgemm(h, false, true, m, 2 * F, H, 1.0f, x + r0 * H, H, wgu, H, 0.0f,
                        gate_up + r0 * 2 * F, 2 * F));
    swiglu_kernel<<<detail::blocks_for(int64_t(m) * F, 256), 256, 0, stream>>>(gate_up + r0 * 2 * F,
                                                                               m, F, act + r0 * F);
    CUDA_CHECK_LAUNCH();
    STATUS_TRY(
        rm_sgemm(h, false, true, m, H, F, 1.0f, act + r0 * F, F, wd, F, 0.0f, out + r0 * H, H));
  }
  return ok_status();
}

status expert_ffn_forward(cudaStream_t stream, const expert_ffn_shape& s,
                          const int64_t* expert_offset, const bf16* x, const bf16* w_gate_up,
                          const bf16* w_down, bf16* out) {
  STATUS_TRY(check_expert_ffn_shape("cuda::expert_ffn_forward", s, expert_offset));
  const int64_t rows = expert_offset[s.num_experts], H = s.hidden, F = s.ffn_dim, E = s.num_experts;
  detail::scratch<float> xf(stream, rows * H), wguf(stream, E * 2 * F * H), wdf(stream, E * H * F),
      h(stream, rows * 2 * F), a(stream, rows * F), y(stream, rows * H);
  for (auto err : {xf.error(), wguf.error(), wdf.error(), h.error(), a.error(), y.error()})
    CUDA_CHECK(err);
  STATUS_TRY(bf16_to_float(stream, x, rows * H, xf.get()));
  STATUS_TRY(bf16_to_float(stream, w_gate_up, E * 2 * F * H, wguf.get()));
  STATUS_TRY(bf16_to_float(stream, w_down, E * H * F, wdf.get()));
  STATUS_TRY(expert_ffn_forward(stream, s, expert_offset, xf.get(), wguf.get(), wdf.get(), h.get(),
                                a.get(), y.get()));
  return bf16_from_float(stream, y.get(), rows * H, out);
}

status expert_ffn_backward(cudaStream_t stream, const expert_ffn_shape& s,
                           const int64_t* expert_offset, const float* x, const float* w_gate_up,
                           const float* w_down, const float* gate_up, const float* act,
                           const float* grad_out, float* grad_x, float* grad_w_gate_up,
                           float* grad_w_down, bool accumulate_weight_grads) {
  STATUS_TRY(check_expert_ffn_shape("cuda::expert_ffn_backward", s, expert_offset));
  cublasHandle_t h;
  STATUS_TRY(detail::cublas_handle(stream, &h));
  const int H = static_cast<int>(s.hidden), F = static_cast<int>(s.ffn_dim);
  const float beta = accumulate_weight_grads ? 1.0f : 0.0f;
  int64_t max_m = 0;
  for (int e = 0; e < s.num_experts; ++e)
    max_m = std::max(max_m, expert_offset[e + 1] - expert_offset[e]);
  detail::scratch<float> grad_a(stream, max_m * F), grad_h(stream, max_m * 2 * F);
  CUDA_CHECK(grad_a.error());
  CUDA_CHECK(grad_h.error());
  for (int e = 0; e < s.num_experts; ++e) {
    const int64_t r0 = expert_offset[e];
    const int m = static_cast<int>(expert_offset[e + 1] - r0);
    float* gwgu = grad_w_gate_up + int64_t(e) * 2 * F * H;
    float* gwd = grad_w_down + int64_t(e) * H * F;
    if (m == 0) {
      if (!accumulate_weight_grads) {
        CUDA_CHECK(cudaMemsetAsync(gwgu, 0, sizeof(float) * 2 * F * H, stream));
        CUDA_CHECK(cudaMemsetAsync(gwd, 0, sizeof(float) * H * F, stream));
      }
      continue;
    }
    const float* wgu = w_gate_up + int64_t(e) * 2 * F * H;
    const float* wd = w_down + int64_t(e) * H * F;
    const float* gy = grad_out + r0 * H;
    STATUS_TRY(rm_sgemm(h, false, false, m, F, H, 1.0f, gy, H, wd, F, 0.0f, grad_a.get(), F));
    STATUS_TRY(rm_sgemm(h, true, false, H, F, m, 1.0f, gy, H, act + r0 * F, F, beta, gwd, F));
    swiglu_backward_kernel<<<detail::blocks_for(int64_t(m) * F, 256), 256, 0, stream>>>(
        gate_up + r0 * 2 * F, grad_a.get(), m, F, grad_h.get());
    CUDA_CHECK_LAUNCH();
    STATUS_TRY(rm_sgemm(h, false, false, m, H, 2 * F, 1.0f, grad_h.get(), 2 * F, wgu, H, 0.0f,
                        grad_x + r0 * H, H));
    STATUS_TRY(rm_sgemm(h, true, false, 2 * F, H, m, 1.0f, grad_h.get(), 2 * F, x + r0 * H, H, beta,
                        gwgu, H));
  }
  return ok_status();
}

}  // namespace moerl::kernels::cuda
