// MoE routing: scores from router logits (softmax or sigmoid), optional group-limited
// selection (DeepSeek-V3), top-k, renormalisation, route scaling, masked tokens; and the
// backward pass to the router logits.
#pragma once

#include <cstdint>

#include "common/error.h"
#include "kernels/thread_pool.h"

namespace moerl::kernels {

enum class score_function { softmax, sigmoid };

struct routing_params {
  int num_experts = 0;
  int topk = 0;  // 1 <= topk <= num_experts
  score_function scoring = score_function::softmax;
  // Group-limited routing: experts are split into num_groups contiguous groups; a token
  // first keeps its topk_groups best groups (group score = sum of its two best selection
  // scores, or its only score when a group has one expert), then takes the top-k experts
  // inside them. num_groups == 1 switches it off. Needs num_experts % num_groups == 0 and
  // topk <= topk_groups * (num_experts / num_groups).
  int num_groups = 1;
  int topk_groups = 1;
  // Weights are divided by the sum of the token's top-k scores (then scaled) when true;
  // otherwise they are the raw scores times route_scale.
  bool renormalize = true;
  float route_scale = 1.0f;
};

// Forward.
//   logits         [num_tokens, num_experts] fp32 router logits
//   selection_bias [num_experts] or nullptr: added to scores for choosing experts only
//                  (DeepSeek-V3's aux-loss-free balancing bias); weights use unbiased scores
//   token_mask     [num_tokens] or nullptr: 0 marks a padding token, whose top-k row is all
//                  -1 with weight 0 and whose scores row is still filled
//   scores         [num_tokens, num_experts] out: softmax/sigmoid of logits (keep for backward)
//   topk_idx       [num_tokens, topk] out: chosen experts, best first (ties: lower index)
//   topk_weights   [num_tokens, topk] out: combine weights
status route_forward(thread_pool& pool, const routing_params& p, const float* logits,
                     const float* selection_bias, const uint8_t* token_mask, int64_t num_tokens,
                     float* scores, int64_t* topk_idx, float* topk_weights);

// Backward: gradient of the loss with respect to the logits.
//   scores, topk_idx  from route_forward (-1 entries contribute nothing)
//   grad_topk_weights [num_tokens, topk] dL/dtopk_weights
//   grad_scores_extra [num_tokens, num_experts] or nullptr: a further dL/dscores to add, e.g.
//                     from load_balance_loss
//   grad_logits       [num_tokens, num_experts] out
// The choice of experts is not differentiable (as torch.topk's indices are not).
status route_backward(thread_pool& pool, const routing_params& p, const float* scores,
                      const int64_t* topk_idx, const float* grad_topk_weights,
                      const float* grad_scores_extra, int64_t num_tokens, float* grad_logits);

}  // namespace moerl::kernels
