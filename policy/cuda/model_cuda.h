// The MoE policy (policy/model.h) with its parameters, gradients, activations and KV cache in
// device memory: forward (training, with mask), backward and generation through the CUDA twins
// of policy/cuda (dense ops) and kernels/cuda (the MoE primitives, cuBLAS GEMMs); the optimiser
// is policy/cuda/adam_cuda.h over params_device() and a device gradient. Either one rank that
// holds every expert (`moerl learn`), or one rank of an expert-parallel group holding its
// experts only (job/ep_policy_group.h), whose MoE layers reach the others through a
// device_expert_exchange (device_expert_exchange.h; today host-staged over the host expert
// plane) exactly as the CPU policy's do through its expert_exchange.
//
// How it shares model.cpp's logic rather than copying it (the choice, and why):
//   - Layout and initialisation: create() builds a host policy::moe_policy from the same
//     config and uploads its parameters. Same tensors, same offsets, same values, by
//     construction: serialize() bytes and content_hash() are comparable with the CPU policy's.
//     That host policy stays as the host mirror that serialize()/load() go through
//     (parameters are copied device->host only there: weight versions, checkpoints).
//   - Argument checks and generation's per-step sampling: policy/internal/model_common.h,
//     shared with model.cpp (the same messages, the same draws from the same rng).
//   - Layer structure: the same sequence of ops as model.cpp's forward/backward/generate, each
//     op the CUDA twin of the CPU op model.cpp calls (embed, rmsnorm, linear, attention,
//     add_inplace, the MoE layer of moe_layer_cuda.h). The sequence itself is written again
//     (model_cuda.cu, model_cuda_backward.cu, model_cuda_generate.cu): one templated body over
//     "host or device ops" would have to abstract buffers, the MoE layer's exchange and the
//     KV cache for about 60 lines of straight-line calls, and would make the CPU reference
//     harder to read. tests/policy/model_cuda_test.cpp holds the two sequences to each other.
//
// Host copies per call: forward copies the logits [b*t, vocab] and the aux loss back (the
// GRPO loss is computed on the host) and the MoE layers' expert row offsets (moe_layer_cuda.h);
// backward uploads dlogits. A decode step copies its logits [rows, vocab] back: sampling runs on
// the host so that it draws from the caller's std::mt19937_64 exactly as the CPU policy does
// (the same tokens for the same logits and seed) and so the per-row EOS bookkeeping stays in
// one place; that is the one activation copy per decode step (plus each MoE layer's E + 1 row
// offsets, which size its expert GEMMs on the host).
//
// Not yet run on a GPU: this machine has none; bench/gpu_check.sh runs the comparison test
// and a short `moerl learn --set job.device=cuda` where one is lent.
// Threading: one thread at a time (one stream, shared scratch). Built only when
// MOERL_HAVE_CUDA (library moerl_policy_cuda).
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "policy/cuda/device_buffer.h"
#include "policy/cuda/device_expert_exchange.h"
#include "policy/cuda/moe_layer_cuda.h"
#include "policy/expert_exchange.h"
#include "policy/model.h"

namespace moerl::policy::cuda {

// Activations of one training forward, on the device, kept for backward. logits, aux_loss and
// each layer's moe.tokens_per_expert are host copies, named as in policy::forward_state so
// that the GRPO step reads either (policy/internal/grpo_step.h).
struct forward_state {
  int64_t batch = 0, seq_len = 0;
  device_buffer<token_id> tokens;  // [b*t]
  device_buffer<uint8_t> mask;     // [b*t]
  struct layer_acts {
    device_buffer<float> x_in, h1, inv1, qkv, probs, attn, x_mid, h2, inv2;
    moe_acts moe;
  };
  std::vector<layer_acts> layers;
  device_buffer<float> x_final, h_final, inv_final, d_logits;  // d_logits [b*t, num_vocab]
  device_buffer<float> d_aux;                                  // [num_layers]
  std::vector<float> logits;                                   // host copy of d_logits
  float aux_loss = 0;  // sum over layers in layer order, coefficient applied
};

class moe_policy {
 public:
  // One rank holding every expert. errc::cuda_error naming the call when the device cannot be
  // used; a bad config is the CPU policy's error (its key named).
  static result<std::unique_ptr<moe_policy>> create(const model_config& cfg);
  // One rank of an expert-parallel group: rank_exchange (the host exchange of this rank; its
  // num_ranks() sets the layout: the dense tensors and this rank's experts, as the CPU
  // policy's; kept, not owned: it outlives the policy) and device_exchange (what the MoE
  // layers call, over the same group; owned). errc::invalid_argument when device_exchange is
  // null or not the same rank of the same group size, before any device call.
  static result<std::unique_ptr<moe_policy>> create(
      const model_config& cfg, expert_exchange& rank_exchange,
      std::unique_ptr<device_expert_exchange> device_exchange);
  ~moe_policy();
  moe_policy(const moe_policy&) = delete;
  moe_policy& operator=(const moe_policy&) = delete;

  const model_config& cfg() const { return host_->cfg(); }
  const param_layout& layout() const { return host_->layout(); }
  int num_expert_ranks() const { return device_exchange_ ? device_exchange_->num_ranks() : 1; }
  size_t num_params() const { return layout().num_floats(); }
  cudaStream_t stream() const { return stream_; }
  float* params_device() { return params_.get(); }
  const float* params_device() const { return params_.get(); }

  // The parameters copied to the host (synchronises the stream).
  result<std::vector<float>> params_host() const;
  // The parameters from the host (num_params() floats, else errc::invalid_argument; synchronises
  // the stream): a published version's or a checkpoint's share.
  status params_from_host(const std::vector<float>& params);
  // Device-to-device copy of another device policy's parameters (same layout).
  status copy_params_from(const moe_policy& other);
  // policy/params.h bytes of the current parameters (copied to the host), and their hash.
  result<std::string> serialize() const;
  result<std::string> content_hash() const;
  // As policy::moe_policy::load; the device copy is updated on success only.
  status load(const std::string& bytes);

  // As policy::moe_policy::forward / backward (the same checks and messages). backward's
  // grads is a device buffer, resized (zeroed) to num_params() if smaller, accumulated into.
  status forward(const std::vector<token_id>& tokens, int64_t b, int64_t t, forward_state* st,
                 const std::vector<uint8_t>& mask = {});
  status backward(forward_state& st, const std::vector<float>& dlogits,
                  device_buffer<float>* grads);
  // As policy::moe_policy::generate, KV cache on the device, sampling on the host (above).
  // A rank of a group keeps stepping until max_new when its own rows are done (the exchange
  // is collective), as the CPU policy does.
  result<generation> generate(const std::vector<std::vector<token_id>>& prompts, int max_new,
                              float temperature, std::mt19937_64& rng);

 private:
  struct layer_offsets {
    size_t norm1, wqkv, wo, norm2, router, w_gate_up, w_down;
  };
  moe_policy() = default;
  status init(const model_config& cfg, expert_exchange& layout_exchange);
  const float* p(size_t off) const { return params_.get() + off; }
  moe_weights moe_weights_of(int layer) const;
  size_t offset_of(const std::string& name) const;

  std::unique_ptr<expert_exchange> host_exchange_;           // one rank: the host mirror's own
  std::unique_ptr<device_expert_exchange> device_exchange_;  // a rank of a group
  // The host mirror: layout, initial values, serialize/load (see above). Its parameters are
  // stale between serialize() calls.
  std::unique_ptr<policy::moe_policy> host_;
  cudaStream_t stream_ = nullptr;
  device_buffer<float> params_;
  std::vector<moe_layer> moe_;
  size_t tok_emb_ = 0, pos_emb_ = 0, norm_f_ = 0, head_ = 0;
  std::vector<layer_offsets> lo_;
};

}  // namespace moerl::policy::cuda
