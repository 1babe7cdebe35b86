#include "kernels/expert_ffn.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <vector>

#include "kernels/blas_threads.h"
#include "kernels/internal/validate.h"

namespace moerl::kernels {

using detail::check_expert_ffn_shape;

// How the GEMMs use the cores. Each expert's GEMM is split into pool.num_threads() parts
// along its output columns (= weight rows): every pool thread streams and packs a disjoint
// share of every expert's weights with a single-threaded BLAS call, so no weight is packed
// twice and the threads never meet inside a GEMM (OpenBLAS's own threading syncs its team
// at every K block, which costs most when the machine is shared). The small activation
// operand is packed once per part instead of once. Experts are visited in the same order by
// every part, so the parts stay balanced whatever the row counts. A pool of one thread
// makes one BLAS call per GEMM with whatever threading the process gave BLAS.

namespace {

inline float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

// Part p of `parts` over [0, n): boundaries on multiples of 16 (the SGEMM register tile's
// width), so no part gets a ragged tile in the middle of the matrix. Empty when n is small.
struct span {
  int begin, end;
  int size() const { return end - begin; }
};
span part_of(int n, int parts, int p) {
  auto edge = [&](int q) {
    if (q >= parts) return n;
    return std::min(n, static_cast<int>(static_cast<int64_t>(n) * q / parts) / 16 * 16);
  };
  return {edge(p), edge(p + 1)};
}

// Row-major C[M, N] = alpha op(A) op(B) + beta C.
void gemm(bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
          float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

// Row-major C [m, n] (leading dimension ldc) = A [m, K] * W [n, K]^T for a weight block W
// in torch.nn.Linear's layout, computed as C^T = W A^T into t [n, m] and transposed into
// place. The same products as the direct call, but OpenBLAS then packs W as its column-panel
// operand (4 weight rows at a time, each read contiguously), which measured 2-5% faster per
// GEMM at a hundred-odd rows and ~25% faster at decode's handful than packing it as the
// row-panel operand (16 rows at a time); the transpose is m * n copies against 2 m n K flops.
void gemm_rows_by_weights(int m, int n, int K, const float* A, const float* W, float* t, float* C,
                          int64_t ldc) {
  gemm(false, true, n, m, K, W, K, A, K, 0.0f, t, m);
  constexpr int B = 16;  // a 16 x 16 tile keeps both sides of the transpose in L1
  for (int j0 = 0; j0 < n; j0 += B)
    for (int r0 = 0; r0 < m; r0 += B) {
      const int j1 = std::min(n, j0 + B), r1 = std::min(m, r0 + B);
      for (int r = r0; r < r1; ++r)
        for (int j = j0; j < j1; ++j) C[r * ldc + j] = t[static_cast<int64_t>(j) * m + r];
    }
}

// Runs fn(part) for every part of pool.num_threads() on its own pool thread, with BLAS on
// one thread meanwhile when there is more than one part (see kernels/blas_threads.h).
template <class Fn>
void for_each_part(thread_pool& pool, Fn&& fn) {
  const int parts = pool.num_threads();
  std::optional<blas_single_thread> one_blas_thread;
  if (parts > 1) one_blas_thread.emplace();
  pool.parallel_for(parts, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) fn(static_cast<int>(p), parts);
  });
}

// Rows of about 8K activations per chunk: small batches stay on one thread.
int64_t swiglu_min_rows(int64_t F) { return std::max<int64_t>(1, 8192 / F); }

// An uninitialised fp32 scratch buffer: every element is written before it is read, so
// zero-filling it (as std::vector would) is wasted memory traffic.
std::unique_ptr<float[]> scratch(int64_t n) { return std::unique_ptr<float[]>(new float[n]); }

// out_e [m, N] = in_e [m, K] * w_e^T for every expert e (rows expert_offset[e].. of in and
// out; w_e is expert e's [N, K] block), each pool part computing its own columns part_of(N).
void grouped_gemm_by_column_parts(thread_pool& pool, const int64_t* expert_offset, int E, int N,
                                  int K, const float* in, const float* w, float* out) {
  int64_t max_m = 0;
  for (int e = 0; e < E; ++e) max_m = std::max(max_m, expert_offset[e + 1] - expert_offset[e]);
  for_each_part(pool, [&](int p, int parts) {
    const span c = part_of(N, parts, p);
    if (c.size() == 0) return;
    auto t = scratch(c.size() * max_m);
    for (int e = 0; e < E; ++e) {
      const int64_t r0 = expert_offset[e];
      const int m = static_cast<int>(expert_offset[e + 1] - r0);
      if (m == 0) continue;
      const float* we = w + static_cast<int64_t>(e) * N * K;
      gemm_rows_by_weights(m, c.size(), K, in + r0 * K, we + static_cast<int64_t>(c.begin) * K,
                           t.get(), out + r0 * N + c.begin, N);
    }
  });
}

}  // namespace

status expert_ffn_forward(thread_pool& pool, const expert_ffn_shape& s,
                          const int64_t* expert_offset, const float* x, const float* w_gate_up,
                          const float* w_down, float* gate_up, float* act, float* out) {
  if (auto st = check_expert_ffn_shape("expert_ffn_forward", s, expert_offset); !st) return st;
  const int H = static_cast<int>(s.hidden), F = static_cast<int>(s.ffn_dim), E = s.num_experts;
  const int64_t rows = expert_offset[E];
  if (rows == 0) return ok_status();
  // h_e [m, 2F] = x_e [m, H] * w_gate_up_e^T.
  grouped_gemm_by_column_parts(pool, expert_offset, E, 2 * F, H, x, w_gate_up, gate_up);
  // a = silu(h_gate) * h_up over all experts' rows at once.
  pool.parallel_for(
      rows,
      [&](int64_t b, int64_t end) {
        for (int64_t r = b; r < end; ++r) {
          const float* g = gate_up + r * 2 * F;
          const float* u = g + F;
          float* ar = act + r * F;
          for (int j = 0; j < F; ++j) ar[j] = g[j] * sigmoid(g[j]) * u[j];
        }
      },
      swiglu_min_rows(F));
  // y_e [m, H] = a_e [m, F] * w_down_e^T.
  grouped_gemm_by_column_parts(pool, expert_offset, E, H, F, act, w_down, out);
  return ok_status();
}

status expert_ffn_forward(thread_pool& pool, const expert_ffn_shape& s,
                          const int64_t* expert_offset, const bf16* x, const bf16* w_gate_up,
                          const bf16* w_down, bf16* out) {
  if (auto st = check_expert_ffn_shape("expert_ffn_forward", s, expert_offset); !st) return st;
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
                           const int64_t* expert_offset, const float* x, const float* w_gate_up,
                           const float* w_down, const float* gate_up, const float* act,
                           const float* grad_out, float* grad_x, float* grad_w_gate_up,
                           float* grad_w_down, bool accumulate_weight_grads) {
  if (auto st = check_expert_ffn_shape("expert_ffn_backward", s, expert_offset); !st) return st;
  const int H = static_cast<int>(s.hidden), F = static_cast<int>(s.ffn_dim), E = s.num_experts;
  const int64_t rows = expert_offset[E];
  const float beta = accumulate_weight_grads ? 1.0f : 0.0f;
  auto grad_a = scratch(rows * F), grad_h = scratch(rows * 2 * F);

  // Phase 1, part p owning columns part_of(F) of grad_a and rows part_of(H) of grad_w_down:
  //   grad_a_e [m, F] = gy_e [m, H] * w_down_e [H, F]
  //   SwiGLU backward on its columns (a = silu(g) * u, silu'(g) = sig(g) (1 + g (1 - sig(g)))),
  //     which fill the same columns of grad_h's gate half and up half
  //   grad_w_down_e [H, F] (+)= gy_e^T [H, m] * a_e [m, F]
  for_each_part(pool, [&](int p, int parts) {
    const span c = part_of(F, parts, p), hr = part_of(H, parts, p);
    for (int e = 0; e < E; ++e) {
      const int64_t r0 = expert_offset[e];
      const int m = static_cast<int>(expert_offset[e + 1] - r0);
      float* gwd = grad_w_down + static_cast<int64_t>(e) * H * F;
      if (m == 0) {  // no rows: a zero (or unchanged) gradient
        if (!accumulate_weight_grads)
          std::fill(gwd + static_cast<int64_t>(hr.begin) * F,
                    gwd + static_cast<int64_t>(hr.end) * F, 0.0f);
        continue;
      }
      const float* wd = w_down + static_cast<int64_t>(e) * H * F;
      const float* gy = grad_out + r0 * H;
      if (c.size() > 0) {
        gemm(false, false, m, c.size(), H, gy, H, wd + c.begin, F, 0.0f,
             grad_a.get() + r0 * F + c.begin, F);
        for (int64_t r = r0; r < r0 + m; ++r) {
          const float* g = gate_up + r * 2 * F;
          const float* u = g + F;
          const float* ga = grad_a.get() + r * F;
          float* gg = grad_h.get() + r * 2 * F;
          float* gu = gg + F;
          for (int j = c.begin; j < c.end; ++j) {
            const float sg = sigmoid(g[j]);
            gg[j] = ga[j] * u[j] * sg * (1.0f + g[j] * (1.0f - sg));
            gu[j] = ga[j] * g[j] * sg;
          }
        }
      }
      if (hr.size() > 0)
        gemm(true, false, hr.size(), F, m, gy + hr.begin, H, act + r0 * F, F, beta,
             gwd + static_cast<int64_t>(hr.begin) * F, F);
    }
  });

  // Phase 2, part p owning columns part_of(H) of grad_x and rows part_of(2F) of
  // grad_w_gate_up:
  //   grad_x_e [m, H] = grad_h_e [m, 2F] * w_gate_up_e [2F, H]
  //   grad_w_gate_up_e [2F, H] (+)= grad_h_e^T [2F, m] * x_e [m, H]
  for_each_part(pool, [&](int p, int parts) {
    const span c = part_of(H, parts, p), fr = part_of(2 * F, parts, p);
    for (int e = 0; e < E; ++e) {
      const int64_t r0 = expert_offset[e];
      const int m = static_cast<int>(expert_offset[e + 1] - r0);
      float* gwgu = grad_w_gate_up + static_cast<int64_t>(e) * 2 * F * H;
      if (m == 0) {
        if (!accumulate_weight_grads)
          std::fill(gwgu + static_cast<int64_t>(fr.begin) * H,
                    gwgu + static_cast<int64_t>(fr.end) * H, 0.0f);
        continue;
      }
      const float* wgu = w_gate_up + static_cast<int64_t>(e) * 2 * F * H;
      const float* gh = grad_h.get() + r0 * 2 * F;
      if (c.size() > 0)
        gemm(false, false, m, c.size(), 2 * F, gh, 2 * F, wgu + c.begin, H, 0.0f,
             grad_x + r0 * H + c.begin, H);
      if (fr.size() > 0)
        gemm(true, false, fr.size(), H, m, gh + fr.begin, 2 * F, x + r0 * H, H, beta,
             gwgu + static_cast<int64_t>(fr.begin) * H, H);
    }
  });
  return ok_status();
}

}  // namespace moerl::kernels
