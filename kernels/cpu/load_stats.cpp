#include "kernels/load_stats.h"

#include <algorithm>
#include <vector>

#include "kernels/internal/validate.h"

namespace moerl::kernels {

status count_tokens_per_expert(thread_pool& pool, const int64_t* topk_idx, int64_t num_tokens,
                               int topk, int num_experts, int64_t* tokens_per_expert) {
  (void)pool;  // a histogram of num_tokens * topk ids is cheaper than waking workers
  KERNELS_REQUIRE(num_tokens >= 0 && topk >= 1 && num_experts >= 1, "count_tokens_per_expert",
                  "bad shape num_tokens = ", num_tokens, ", topk = ", topk,
                  ", num_experts = ", num_experts);
  if (auto st = detail::check_topk_idx("count_tokens_per_expert", topk_idx, num_tokens, topk,
                                       num_experts);
      !st)
    return st;
  std::fill(tokens_per_expert, tokens_per_expert + num_experts, 0);
  for (int64_t i = 0; i < num_tokens * topk; ++i)
    if (topk_idx[i] >= 0) ++tokens_per_expert[topk_idx[i]];
  return ok_status();
}

double load_imbalance(const int64_t* tokens_per_expert, int num_experts) {
  if (num_experts <= 0) return 0.0;
  int64_t total = 0, max_load = 0;
  for (int e = 0; e < num_experts; ++e) {
    total += tokens_per_expert[e];
    max_load = std::max(max_load, tokens_per_expert[e]);
  }
  if (total == 0) return 0.0;
  return static_cast<double>(max_load) * num_experts / static_cast<double>(total);
}

status load_balance_loss(thread_pool& pool, const float* scores, const int64_t* topk_idx,
                         int64_t num_tokens, int num_experts, int topk, float coeff, float* loss,
                         float* grad_scores) {
  std::vector<int64_t> counts(num_experts > 0 ? num_experts : 0);
  if (auto st =
          count_tokens_per_expert(pool, topk_idx, num_tokens, topk, num_experts, counts.data());
      !st)
    return st;
  const int E = num_experts;
  std::vector<uint8_t> routed(static_cast<size_t>(num_tokens), 0);
  int64_t n_routed = 0;
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int k = 0; k < topk; ++k) routed[t] |= topk_idx[t * topk + k] >= 0;
    n_routed += routed[t];
  }
  if (n_routed == 0) {
    *loss = 0.0f;
    if (grad_scores) std::fill(grad_scores, grad_scores + num_tokens * E, 0.0f);
    return ok_status();
  }
  // P_e summed serially in double and token order: one fixed order, whatever the pool size.
  std::vector<double> prob_sum(E, 0.0);
  for (int64_t t = 0; t < num_tokens; ++t)
    if (routed[t])
      for (int e = 0; e < E; ++e) prob_sum[e] += scores[t * E + e];
  const double n = static_cast<double>(n_routed);
  std::vector<float> grad_per_expert(E);
  double acc = 0.0;
  for (int e = 0; e < E; ++e) {
    const double f = static_cast<double>(counts[e]) / (n * topk);
    acc += f * (prob_sum[e] / n);
    grad_per_expert[e] = static_cast<float>(coeff * E * f / n);
  }
  *loss = static_cast<float>(coeff * E * acc);
  if (grad_scores) {
    pool.parallel_for(
        num_tokens,
        [&](int64_t b, int64_t e) {
          for (int64_t t = b; t < e; ++t)
            for (int x = 0; x < E; ++x)
              grad_scores[t * E + x] = routed[t] ? grad_per_expert[x] : 0.0f;
        },
        64);
  }
  return ok_status();
}

}  // namespace moerl::kernels
