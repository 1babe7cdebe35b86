// The MoE policy: token + learned position embeddings, num_layers pre-norm blocks
//   x += attn(rmsnorm(x));  x += moe(rmsnorm(x))
// then a final RMSNorm and a linear output head over the vocabulary.
//
// Sequence mixer: causal multi-head softmax attention. The tasks need content-addressed
// lookups (sorting must find the next-smallest digit anywhere in the prompt; addition must
// fetch the two digits of the current column), which a fixed-kernel mixer (a convolution
// or a position-independent running average) cannot do without many layers; attention does
// it in one, and with a KV cache a decode step costs O(position), not O(position^2).
//
// Experts: each layer's experts are split over the ranks of `exchange` (contiguously); this
// object holds the dense parameters and ITS ranks' experts only. Every tensor, and every
// expert's slice, is initialised from its own seed derived from (config seed, tensor name,
// global expert id), so a sharded group starts from exactly the single-rank weights.
//
// Threading: one moe_policy is used by one thread at a time (forward/backward/generate
// share scratch state and the exchange's collective order).
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "kernels/thread_pool.h"
#include "policy/expert_exchange.h"
#include "policy/moe_layer.h"
#include "policy/params.h"
#include "policy/vocab.h"

namespace moerl::policy {

struct model_config {
  int max_seq_len = 32;  // prompt + completion tokens the position table covers
  int d_model = 64;
  int num_layers = 2;
  int num_heads = 4;  // d_model % num_heads == 0
  int num_experts = 4;
  int top_k = 2;
  int ffn_dim = 64;  // each expert's SwiGLU width
  float aux_loss_coef = 0.01f;
  uint64_t seed = 1;
  int num_threads = 1;  // kernels' CPU pool

  // From keys policy.*; errc::invalid_config names the offending key.
  static result<model_config> from_config(const config& cfg);
  status validate() const;
};

// Activations of one training forward, kept for backward.
struct forward_state {
  int64_t batch = 0, seq_len = 0;
  std::vector<token_id> tokens;  // [b, t]
  std::vector<uint8_t> mask;     // [b*t]: 0 for padding (no expert visits it)
  struct layer_acts {
    std::vector<float> x_in, h1, inv1, qkv, probs, attn, x_mid, h2, inv2;
    moe_state moe;
  };
  std::vector<layer_acts> layers;
  std::vector<float> x_final, h_final, inv_final;
  std::vector<float> logits;  // [b*t, num_vocab]
  float aux_loss = 0;         // sum over layers, coefficient applied
};

// Output of generate(): one entry per prompt row.
struct generation {
  std::vector<std::vector<token_id>> completions;  // sampled tokens, ending at EOS if reached
  std::vector<std::vector<float>> logprobs;        // log pi(token) under the sampling
                                                   // distribution (logits / temperature)
};

class moe_policy {
 public:
  // Initialised from cfg.seed. `exchange` must outlive the policy.
  static result<std::unique_ptr<moe_policy>> create(const model_config& cfg,
                                                    expert_exchange& exchange);

  const model_config& cfg() const { return cfg_; }
  const param_layout& layout() const { return layout_; }
  std::vector<float>& params() { return params_; }
  const std::vector<float>& params() const { return params_; }

  // Weight versions and checkpoints (format in params.h).
  std::string serialize() const { return serialize_params(layout_, params_); }
  status load(const std::string& bytes);
  std::string content_hash() const { return policy::content_hash(serialize()); }

  // Training forward over b sequences of t tokens each (row-major [b, t]). mask [b*t]
  // (empty: every position is real) marks padding with 0: padding visits no expert, and
  // causal attention keeps it from affecting earlier positions. Padding is given by the
  // mask, not by token value, because a policy may sample any token, tok_pad included.
  // Mode: exchange_mode::normal.
  status forward(const std::vector<token_id>& tokens, int64_t b, int64_t t, forward_state* st,
                 const std::vector<uint8_t>& mask = {});
  // dlogits [b*t, num_vocab]; adds d(loss + st.aux_loss)/d(params) into grads
  // (resized to layout().num_floats() if smaller).
  status backward(forward_state& st, const std::vector<float>& dlogits, std::vector<float>* grads);

  // Autoregressive sampling, one token per step for every row, each step through the
  // exchange in low-latency mode; a KV cache per layer keeps steps O(position). All prompts
  // must have the same length. Rows stop at EOS or after max_new tokens. temperature > 0.
  // In a group of several ranks, every rank must call generate with the same prompt length
  // and max_new (each then makes the same sequence of collective exchange calls).
  result<generation> generate(const std::vector<std::vector<token_id>>& prompts, int max_new,
                              float temperature, std::mt19937_64& rng);

 private:
  moe_policy(const model_config& cfg, expert_exchange& exchange);
  void build_layout();
  void init_params();
  moe_weights moe_weights_of(int layer) const;
  const float* p(size_t off) const { return params_.data() + off; }

  struct layer_offsets {
    size_t norm1, wqkv, wo, norm2, router, w_gate_up, w_down;
  };

  model_config cfg_;
  expert_exchange& exchange_;
  kernels::thread_pool pool_;
  std::vector<moe_layer> moe_;
  param_layout layout_;
  std::vector<float> params_;
  size_t tok_emb_ = 0, pos_emb_ = 0, norm_f_ = 0, head_ = 0;
  std::vector<layer_offsets> lo_;
};

}  // namespace moerl::policy
