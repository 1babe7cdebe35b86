// The policy's MoE feed-forward layer, assembled from kernels/ primitives (routing,
// grouped SwiGLU FFN, load-balance loss and their backward passes) around an
// expert_exchange that takes the routed tokens to their experts and brings the weighted
// outputs back, so that experts may live on other ranks. Holds no parameters: the model
// passes its weight views in.
#pragma once

#include <cstdint>
#include <vector>

#include "common/error.h"
#include "kernels/routing.h"
#include "kernels/thread_pool.h"
#include "policy/expert_exchange.h"

namespace moerl::policy {

struct moe_shape {
  int num_experts = 0;  // global count; this rank holds num_experts / num_ranks of them
  int top_k = 0;
  int64_t hidden = 0;
  int64_t ffn_dim = 0;
  float aux_loss_coef = 0;  // Switch load-balance loss weight; 0 turns it off
};

struct moe_weights {
  const float* router = nullptr;     // [hidden, num_experts]
  const float* w_gate_up = nullptr;  // [local experts, 2 * ffn_dim, hidden] (kernels layout)
  const float* w_down = nullptr;     // [local experts, hidden, ffn_dim]
};

struct moe_grads {  // accumulated into, same layouts as moe_weights
  float* router = nullptr;
  float* w_gate_up = nullptr;
  float* w_down = nullptr;
};

// The layer's routing: softmax scores, top-k, renormalised weights (shared with the device
// layer, policy/cuda/moe_layer_cuda.h).
kernels::routing_params routing_of(const moe_shape& s);

// Everything forward keeps for backward, and the layer's load statistics.
struct moe_state {
  int64_t num_tokens = 0;
  std::vector<float> scores;               // [n, E] routing scores
  std::vector<int64_t> topk_idx;           // [n, k]
  std::vector<float> topk_weights;         // [n, k]
  std::vector<int64_t> tokens_per_expert;  // [E] (token, k) entries per global expert
  exchange_handle handle;
  std::vector<float> recv_x;           // [recv rows, hidden] FFN input on this rank
  std::vector<float> gate_up;          // [recv rows, 2F]
  std::vector<float> act;              // [recv rows, F]
  std::vector<float> recv_out;         // [recv rows, hidden] FFN output on this rank
  float aux_loss = 0;                  // coefficient already applied
  std::vector<float> grad_scores_aux;  // [n, E] d(aux_loss)/d(scores)
};

class moe_layer {
 public:
  moe_layer(const moe_shape& shape, kernels::thread_pool& pool, expert_exchange& exchange);

  const moe_shape& shape() const { return shape_; }
  int num_local_experts() const { return shape_.num_experts / exchange_.num_ranks(); }

  // x [n, hidden] -> y [n, hidden]. token_mask [n] (nullptr: all real): 0 marks a padding
  // token, which visits no expert and gets y = 0.
  status forward(const moe_weights& w, const float* x, const uint8_t* token_mask, int64_t n,
                 exchange_mode mode, moe_state* st, float* y);
  // dy [n, hidden] -> dx [n, hidden] (overwritten); weight gradients accumulate into g.
  // The aux loss's gradient (st.grad_scores_aux) is included.
  status backward(const moe_weights& w, const float* x, const moe_state& st, const float* dy,
                  exchange_mode mode, float* dx, const moe_grads& g);

 private:
  moe_shape shape_;
  kernels::thread_pool& pool_;
  expert_exchange& exchange_;
};

}  // namespace moerl::policy
