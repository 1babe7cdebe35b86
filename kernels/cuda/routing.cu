// CUDA twin of kernels/cpu/routing.cpp: one thread per token, the same selection rules
// (group score = best two, ties to the lower index, renormalisation guard 1e-20).
#include <cfloat>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/internal/validate.h"

namespace moerl::kernels::cuda {

namespace {

constexpr float renorm_eps = 1e-20f;

struct route_args {
  int E, K, G, TG, per_group;
  bool softmax, renormalize;
  float scale;
};

__device__ int argmax_allowed(const float* s, const float* bias, const uint8_t* allowed, int n) {
  int best = -1;
  float best_v = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (!allowed[i]) continue;
    const float v = s[i] + (bias ? bias[i] : 0.0f);
    if (best < 0 || v > best_v) {
      best = i;
      best_v = v;
    }
  }
  return best;
}

// allowed_ws: [num_tokens, E] scratch; group_ws: [num_tokens, 2 * G] scratch.
__global__ void route_forward_kernel(route_args a, const float* logits, const float* bias,
                                     const uint8_t* mask, int64_t T, float* scores, int64_t* idx,
                                     float* w, uint8_t* allowed_ws, float* group_ws) {
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t >= T) return;
  const int E = a.E, K = a.K, G = a.G;
  const float* z = logits + t * E;
  float* s = scores + t * E;
  if (a.softmax) {
    float m = z[0];
    for (int i = 1; i < E; ++i) m = fmaxf(m, z[i]);
    float sum = 0.0f;
    for (int i = 0; i < E; ++i) {
      s[i] = expf(z[i] - m);
      sum += s[i];
    }
    for (int i = 0; i < E; ++i) s[i] /= sum;
  } else {
    for (int i = 0; i < E; ++i) s[i] = 1.0f / (1.0f + expf(-z[i]));
  }
  int64_t* ti = idx + t * K;
  float* tw = w + t * K;
  if (mask && !mask[t]) {
    for (int k = 0; k < K; ++k) {
      ti[k] = -1;
      tw[k] = 0.0f;
    }
    return;
  }
  uint8_t* allowed = allowed_ws + t * E;
  for (int i = 0; i < E; ++i) allowed[i] = 1;
  if (G > 1) {
    float* gscore = group_ws + t * 2 * G;
    uint8_t* gfree = reinterpret_cast<uint8_t*>(gscore + G);  // G bytes fit in G floats
    for (int g = 0; g < G; ++g) {
      float best = -FLT_MAX, second = -FLT_MAX;
      bool have_best = false;
      for (int i = g * a.per_group; i < (g + 1) * a.per_group; ++i) {
        const float v = s[i] + (bias ? bias[i] : 0.0f);
        if (!have_best || v > best) {
          second = best;
          best = v;
          have_best = true;
        } else if (v > second) {
          second = v;
        }
      }
      gscore[g] = a.per_group > 1 ? best + second : best;
      gfree[g] = 1;
    }
    for (int i = 0; i < E; ++i) allowed[i] = 0;
    for (int r = 0; r < a.TG; ++r) {
      int bg = -1;
      for (int g = 0; g < G; ++g)
        if (gfree[g] && (bg < 0 || gscore[g] > gscore[bg])) bg = g;
      gfree[bg] = 0;
      for (int i = bg * a.per_group; i < (bg + 1) * a.per_group; ++i) allowed[i] = 1;
    }
  }
  float sum = 0.0f;
  for (int k = 0; k < K; ++k) {
    const int best = argmax_allowed(s, bias, allowed, E);
    allowed[best] = 0;
    ti[k] = best;
    tw[k] = s[best];
    sum += s[best];
  }
  const float denom = a.renormalize ? sum + renorm_eps : 1.0f;
  for (int k = 0; k < K; ++k) tw[k] = tw[k] / denom * a.scale;
}

// gs_ws: [num_tokens, E] scratch for d loss / d scores.
__global__ void route_backward_kernel(route_args a, const float* scores, const int64_t* idx,
                                      const float* gw, const float* extra, int64_t T, float* gl,
                                      float* gs_ws) {
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t >= T) return;
  const int E = a.E, K = a.K;
  const float* s = scores + t * E;
  const int64_t* ti = idx + t * K;
  const float* g = gw + t * K;
  float* gs = gs_ws + t * E;
  for (int i = 0; i < E; ++i) gs[i] = extra ? extra[t * E + i] : 0.0f;
  if (a.renormalize) {
    float sum = 0.0f, dot = 0.0f;
    for (int k = 0; k < K; ++k)
      if (ti[k] >= 0 && ti[k] < E) {
        sum += s[ti[k]];
        dot += g[k] * s[ti[k]];
      }
    const float S = sum + renorm_eps;
    for (int k = 0; k < K; ++k)
      if (ti[k] >= 0 && ti[k] < E) gs[ti[k]] += a.scale * (g[k] / S - dot / (S * S));
  } else {
    for (int k = 0; k < K; ++k)
      if (ti[k] >= 0 && ti[k] < E) gs[ti[k]] += a.scale * g[k];
  }
  float* out = gl + t * E;
  if (a.softmax) {
    float dot = 0.0f;
    for (int i = 0; i < E; ++i) dot += gs[i] * s[i];
    for (int i = 0; i < E; ++i) out[i] = s[i] * (gs[i] - dot);
  } else {
    for (int i = 0; i < E; ++i) out[i] = gs[i] * s[i] * (1.0f - s[i]);
  }
}

route_args make_args(const routing_params& p) {
  return {p.num_experts,
          p.topk,
          p.num_groups,
          p.topk_groups,
          p.num_experts / p.num_groups,
          p.scoring == score_function::softmax,
          p.renormalize,
          p.route_scale};
}

}  // namespace

status route_forward(cudaStream_t stream, const routing_params& p, const float* logits,
                     const float* selection_bias, const uint8_t* token_mask, int64_t num_tokens,
                     float* scores, int64_t* topk_idx, float* topk_weights) {
  STATUS_TRY(kernels::detail::check_routing_params("cuda::route_forward", p, num_tokens));
  if (num_tokens == 0) return ok_status();
  detail::scratch<uint8_t> allowed(stream, num_tokens * p.num_experts);
  detail::scratch<float> groups(stream, num_tokens * 2 * p.num_groups);
  CUDA_CHECK(allowed.error());
  CUDA_CHECK(groups.error());
  route_forward_kernel<<<detail::blocks_for(num_tokens, 128, INT32_MAX), 128, 0, stream>>>(
      make_args(p), logits, selection_bias, token_mask, num_tokens, scores, topk_idx, topk_weights,
      allowed.get(), groups.get());
  CUDA_CHECK_LAUNCH();
  return ok_status();
}

status route_backward(cudaStream_t stream, const routing_params& p, const float* scores,
                      const int64_t* topk_idx, const float* grad_topk_weights,
                      const float* grad_scores_extra, int64_t num_tokens, float* grad_logits) {
  STATUS_TRY(kernels::detail::check_routing_params("cuda::route_backward", p, num_tokens));
  if (num_tokens == 0) return ok_status();
  detail::scratch<float> gs(stream, num_tokens * p.num_experts);
  CUDA_CHECK(gs.error());
  route_backward_kernel<<<detail::blocks_for(num_tokens, 128, INT32_MAX), 128, 0, stream>>>(
      make_args(p), scores, topk_idx, grad_topk_weights, grad_scores_extra, num_tokens, grad_logits,
      gs.get());
  CUDA_CHECK_LAUNCH();
  return ok_status();
}

}  // namespace moerl::kernels::cuda
