#include "kernels/expert_ffn.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/validate.h"

namespace moerl::kernels {

namespace {

status check_shape(const char* fn, const expert_ffn_shape& s, const int64_t* offset) {
  KERNELS_REQUIRE(s.num_experts >= 1 && s.hidden >= 1 && s.ffn_dim >= 1, fn,
                  "bad shape num_experts = ", s.num_experts, ", hidden = ", s.hidden,
                  ", ffn_dim = ", s.ffn_dim);
  KERNELS_REQUIRE(offset != nullptr, fn, "expert_offset is null");
  KERNELS_REQUIRE(offset[0] == 0, fn, "expert_offset[0] = ", offset[0], " must be 0");
  for (int e = 0; e < s.num_experts; ++e)
    KERNELS_REQUIRE(offset[e + 1] >= offset[e], fn, "expert_offset is not non-decreasing at expert ",
                    e, " (", offset[e], " > ", offset[e + 1], ")");
  // BLAS dimensions are int: refuse what would overflow them rather than corrupt memory.
  KERNELS_REQUIRE(offset[s.num_experts] < (int64_t{1} << 31) && 2 * s.ffn_dim < (int64_t{1} << 31) &&
                      s.hidden < (int64_t{1} << 31),
                  fn, "a dimension exceeds BLAS's int range");
  return ok_status();
}

inline float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

}  // namespace

status expert_ffn_forward(thread_pool& pool, const expert_ffn_shape& s,
                          const int64_t* expert_offset, const float* x,
                          const float* w_gate_up, const float* w_down, float* gate_up,
                          float* act, float* out) {
  if (auto st = check_shape("expert_ffn_forward", s, expert_offset); !st) return st;
  const int H = static_cast<int>(s.hidden), F = static_cast<int>(s.ffn_dim);
  // One GEMM pair per expert, each multithreaded inside OpenBLAS; experts run in sequence so
  // two BLAS thread teams never compete for the cores.
  for (int e = 0; e < s.num_experts; ++e) {
    const int64_t r0 = expert_offset[e];
    const int m = static_cast<int>(expert_offset[e + 1] - r0);
    if (m == 0) continue;
    const float* wgu = w_gate_up + static_cast<int64_t>(e) * 2 * F * H;
    const float* wd = w_down + static_cast<int64_t>(e) * H * F;
    float* h = gate_up + r0 * 2 * F;
    float* a = act + r0 * F;
    // h [m, 2F] = x_e [m, H] * w_gate_up_e^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, 2 * F, H, 1.0f, x + r0 * H, H, wgu, H,
                0.0f, h, 2 * F);
    pool.parallel_for(m, [&](int64_t b, int64_t end) {
      for (int64_t r = b; r < end; ++r) {
        const float* g = h + r * 2 * F;
        const float* u = g + F;
        float* ar = a + r * F;
        for (int j = 0; j < F; ++j) ar[j] = g[j] * sigmoid(g[j]) * u[j];
      }
    }, std::max(1, 8192 / F));
    // y_e [m, H] = a_e [m, F] * w_down_e^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, H, F, 1.0f, a, F, wd, F, 0.0f,
                out + r0 * H, H);
  }
  return ok_status();
}

status expert_ffn_forward(thread_pool& pool, const expert_ffn_shape& s,
                          const int64_t* expert_offset, const bf16* x, const bf16* w_gate_up,
                          const bf16* w_down, bf16* out) {
  if (auto st = check_shape("expert_ffn_forward", s, expert_offset); !st) return st;
  const int64_t H = s.hidden, F = s.ffn_dim;
  // Convert one expert at a time so the fp32 copies stay one expert's worth of weights.
  expert_ffn_shape one = s;
  one.num_experts = 1;
  std::vector<float> xf, wguf(2 * F * H), wdf(H * F), hf, af, yf;
  for (int e = 0; e < s.num_experts; ++e) {
    const int64_t r0 = expert_offset[e], m = expert_offset[e + 1] - r0;
    if (m == 0) continue;
    xf.resize(m * H);
    hf.resize(m * 2 * F);
    af.resize(m * F);
    yf.resize(m * H);
    (void)bf16_to_float(pool, x + r0 * H, m * H, xf.data());
    (void)bf16_to_float(pool, w_gate_up + e * 2 * F * H, 2 * F * H, wguf.data());
    (void)bf16_to_float(pool, w_down + e * H * F, H * F, wdf.data());
    const int64_t local_offset[2] = {0, m};
    if (auto st = expert_ffn_forward(pool, one, local_offset, xf.data(), wguf.data(), wdf.data(),
                                     hf.data(), af.data(), yf.data());
        !st)
      return st;
    (void)bf16_from_float(pool, yf.data(), m * H, out + r0 * H);
  }
  return ok_status();
}

status expert_ffn_backward(thread_pool& pool, const expert_ffn_shape& s,
                           const int64_t* expert_offset, const float* x,
                           const float* w_gate_up, const float* w_down, const float* gate_up,
                           const float* act, const float* grad_out, float* grad_x,
                           float* grad_w_gate_up, float* grad_w_down,
                           bool accumulate_weight_grads) {
  if (auto st = check_shape("expert_ffn_backward", s, expert_offset); !st) return st;
  const int H = static_cast<int>(s.hidden), F = static_cast<int>(s.ffn_dim);
  const float beta = accumulate_weight_grads ? 1.0f : 0.0f;
  std::vector<float> grad_a, grad_h;
  for (int e = 0; e < s.num_experts; ++e) {
    const int64_t r0 = expert_offset[e];
    const int m = static_cast<int>(expert_offset[e + 1] - r0);
    float* gwgu = grad_w_gate_up + static_cast<int64_t>(e) * 2 * F * H;
    float* gwd = grad_w_down + static_cast<int64_t>(e) * H * F;
    if (m == 0) {
      if (!accumulate_weight_grads) {
        std::fill(gwgu, gwgu + static_cast<int64_t>(2) * F * H, 0.0f);
        std::fill(gwd, gwd + static_cast<int64_t>(H) * F, 0.0f);
      }
      continue;
    }
    const float* wgu = w_gate_up + static_cast<int64_t>(e) * 2 * F * H;
    const float* wd = w_down + static_cast<int64_t>(e) * H * F;
    const float* h = gate_up + r0 * 2 * F;
    const float* a = act + r0 * F;
    const float* gy = grad_out + r0 * H;
    grad_a.resize(static_cast<size_t>(m) * F);
    grad_h.resize(static_cast<size_t>(m) * 2 * F);
    // grad_a [m, F] = gy [m, H] * w_down_e [H, F]
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, F, H, 1.0f, gy, H, wd, F, 0.0f,
                grad_a.data(), F);
    // grad_w_down_e [H, F] (+)= gy^T [H, m] * a [m, F]
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, H, F, m, 1.0f, gy, H, a, F, beta, gwd, F);
    // SwiGLU: a = silu(g) * u, silu'(g) = sig(g) * (1 + g * (1 - sig(g))).
    pool.parallel_for(m, [&](int64_t b, int64_t end) {
      for (int64_t r = b; r < end; ++r) {
        const float* g = h + r * 2 * F;
        const float* u = g + F;
        const float* ga = grad_a.data() + r * F;
        float* gg = grad_h.data() + r * 2 * F;
        float* gu = gg + F;
        for (int j = 0; j < F; ++j) {
          const float sg = sigmoid(g[j]);
          gg[j] = ga[j] * u[j] * sg * (1.0f + g[j] * (1.0f - sg));
          gu[j] = ga[j] * g[j] * sg;
        }
      }
    }, std::max(1, 8192 / F));
    // grad_x_e [m, H] = grad_h [m, 2F] * w_gate_up_e [2F, H]
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, H, 2 * F, 1.0f, grad_h.data(), 2 * F,
                wgu, H, 0.0f, grad_x + r0 * H, H);
    // grad_w_gate_up_e [2F, H] (+)= grad_h^T [2F, m] * x_e [m, H]
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, 2 * F, H, m, 1.0f, grad_h.data(), 2 * F,
                x + r0 * H, H, beta, gwgu, H);
  }
  return ok_status();
}

}  // namespace moerl::kernels
