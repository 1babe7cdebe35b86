// Expert-load statistics: tokens per expert, the Switch-Transformer load-balancing
// auxiliary loss and its gradient, and an imbalance figure (max/mean load).
#pragma once

#include <cstdint>

#include "common/error.h"
#include "kernels/thread_pool.h"

namespace moerl::kernels {

// tokens_per_expert [num_experts] out: number of (token, k) entries of topk_idx
// [num_tokens, topk] naming expert e; -1 entries are skipped, other out-of-range ids are an
// invalid_argument error.
status count_tokens_per_expert(thread_pool& pool, const int64_t* topk_idx, int64_t num_tokens,
                               int topk, int num_experts, int64_t* tokens_per_expert);

// max_e load / mean_e load over all experts; 0 when nothing is routed.
double load_imbalance(const int64_t* tokens_per_expert, int num_experts);

// Switch-style auxiliary loss over the routed (non-padding) tokens:
//   N   = number of tokens whose top-k row has at least one entry != -1
//   f_e = tokens_per_expert[e] / (N * topk)        (not differentiated)
//   P_e = (1/N) * sum over routed tokens t of scores[t, e]
//   loss = coeff * num_experts * sum_e f_e * P_e
//   scores     [num_tokens, num_experts] from route_forward
//   grad_scores [num_tokens, num_experts] or nullptr, out: d(loss)/d(scores), zero on
//               padding rows; feed it to route_backward's grad_scores_extra
// loss is 0 (and the gradient all zero) when N == 0.
status load_balance_loss(thread_pool& pool, const float* scores, const int64_t* topk_idx,
                         int64_t num_tokens, int num_experts, int topk, float coeff, float* loss,
                         float* grad_scores);

}  // namespace moerl::kernels
