#include "kernels/routing.h"

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/internal/validate.h"

namespace moerl::kernels {

namespace {

// Keeps DeepSeek-V3's guard against an all-underflowed softmax row dividing by zero; far
// below fp32's resolution for any real sum, so it does not change normal results.
constexpr float renorm_eps = 1e-20f;

// Index of the largest value among candidates[i] with allowed[i]; ties go to the lower
// index, so the choice never depends on evaluation order.
int argmax_allowed(const float* v, const uint8_t* allowed, int n) {
  int best = -1;
  for (int i = 0; i < n; ++i)
    if (allowed[i] && (best < 0 || v[i] > v[best])) best = i;
  return best;
}

}  // namespace

status route_forward(thread_pool& pool, const routing_params& p, const float* logits,
                     const float* selection_bias, const uint8_t* token_mask, int64_t num_tokens,
                     float* scores, int64_t* topk_idx, float* topk_weights) {
  if (auto st = detail::check_routing_params("route_forward", p, num_tokens); !st) return st;
  const int E = p.num_experts, K = p.topk, G = p.num_groups;
  const int per_group = E / G;
  pool.parallel_for(
      num_tokens,
      [&](int64_t b, int64_t e) {
        std::vector<float> sel(E), group_score(G);
        std::vector<uint8_t> allowed(E), group_allowed(G), keep(G);
        std::vector<float> top_v(K);
        std::vector<int> top_i(K);
        for (int64_t t = b; t < e; ++t) {
          const float* z = logits + t * E;
          float* s = scores + t * E;
          if (p.scoring == score_function::softmax) {
            float m = z[0];
            for (int i = 1; i < E; ++i) m = std::max(m, z[i]);
            float sum = 0.0f;
            for (int i = 0; i < E; ++i) {
              s[i] = std::exp(z[i] - m);
              sum += s[i];
            }
            for (int i = 0; i < E; ++i) s[i] /= sum;
          } else {
            for (int i = 0; i < E; ++i) s[i] = 1.0f / (1.0f + std::exp(-z[i]));
          }
          int64_t* idx = topk_idx + t * K;
          float* w = topk_weights + t * K;
          if (token_mask && !token_mask[t]) {
            for (int k = 0; k < K; ++k) {
              idx[k] = -1;
              w[k] = 0.0f;
            }
            continue;
          }
          for (int i = 0; i < E; ++i) sel[i] = s[i] + (selection_bias ? selection_bias[i] : 0.0f);
          std::fill(allowed.begin(), allowed.end(), 1);
          if (G > 1) {
            for (int g = 0; g < G; ++g) {
              const float* v = sel.data() + g * per_group;
              float best = v[0], second = -std::numeric_limits<float>::infinity();
              for (int i = 1; i < per_group; ++i) {
                if (v[i] > best) {
                  second = best;
                  best = v[i];
                } else if (v[i] > second) {
                  second = v[i];
                }
              }
              group_score[g] = per_group > 1 ? best + second : best;
            }
            std::fill(group_allowed.begin(), group_allowed.end(), 1);
            std::fill(keep.begin(), keep.end(), 0);
            for (int r = 0; r < p.topk_groups; ++r) {
              const int g = argmax_allowed(group_score.data(), group_allowed.data(), G);
              group_allowed[g] = 0;
              keep[g] = 1;
            }
            for (int i = 0; i < E; ++i) allowed[i] = keep[i / per_group];
          }
          // One pass with insertion into a sorted list of K: best first, ties to the lower index
          // (a later equal value never passes an earlier one), the same choice as taking the
          // allowed argmax K times, which the CUDA twin does.
          int n = 0;
          for (int i = 0; i < E; ++i) {
            if (!allowed[i]) continue;
            const float v = sel[i];
            if (n == K && !(v > top_v[K - 1])) continue;
            int pos = n < K ? n : K - 1;
            for (; pos > 0 && v > top_v[pos - 1]; --pos) {
              top_v[pos] = top_v[pos - 1];
              top_i[pos] = top_i[pos - 1];
            }
            top_v[pos] = v;
            top_i[pos] = i;
            if (n < K) ++n;
          }
          float sum = 0.0f;
          for (int k = 0; k < K; ++k) {
            idx[k] = top_i[k];
            w[k] = s[top_i[k]];
            sum += s[top_i[k]];
          }
          const float denom = p.renormalize ? sum + renorm_eps : 1.0f;
          for (int k = 0; k < K; ++k) w[k] = w[k] / denom * p.route_scale;
        }
      },
      16);
  return ok_status();
}

status route_backward(thread_pool& pool, const routing_params& p, const float* scores,
                      const int64_t* topk_idx, const float* grad_topk_weights,
                      const float* grad_scores_extra, int64_t num_tokens, float* grad_logits) {
  if (auto st = detail::check_routing_params("route_backward", p, num_tokens); !st) return st;
  if (auto st =
          detail::check_topk_idx("route_backward", topk_idx, num_tokens, p.topk, p.num_experts);
      !st)
    return st;
  const int E = p.num_experts, K = p.topk;
  pool.parallel_for(
      num_tokens,
      [&](int64_t b, int64_t e) {
        std::vector<float> gs(E);
        for (int64_t t = b; t < e; ++t) {
          const float* s = scores + t * E;
          const int64_t* idx = topk_idx + t * K;
          const float* g = grad_topk_weights + t * K;
          for (int i = 0; i < E; ++i)
            gs[i] = grad_scores_extra ? grad_scores_extra[t * E + i] : 0.0f;
          if (p.renormalize) {
            // w_k = c * s_k / S with S = sum_j s_j + eps: dw_k/ds_j = c (delta_kj / S - s_k / S^2).
            float sum = 0.0f, dot = 0.0f;
            for (int k = 0; k < K; ++k)
              if (idx[k] >= 0) {
                sum += s[idx[k]];
                dot += g[k] * s[idx[k]];
              }
            const float S = sum + renorm_eps;
            for (int k = 0; k < K; ++k)
              if (idx[k] >= 0) gs[idx[k]] += p.route_scale * (g[k] / S - dot / (S * S));
          } else {
            for (int k = 0; k < K; ++k)
              if (idx[k] >= 0) gs[idx[k]] += p.route_scale * g[k];
          }
          float* gl = grad_logits + t * E;
          if (p.scoring == score_function::softmax) {
            float dot = 0.0f;
            for (int i = 0; i < E; ++i) dot += gs[i] * s[i];
            for (int i = 0; i < E; ++i) gl[i] = s[i] * (gs[i] - dot);
          } else {
            for (int i = 0; i < E; ++i) gl[i] = gs[i] * s[i] * (1.0f - s[i]);
          }
        }
      },
      16);
  return ok_status();
}

}  // namespace moerl::kernels
