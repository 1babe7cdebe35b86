// The policy's MoE layer on the device for one process that holds every expert (a single
// expert-parallel rank): policy/moe_layer.h's forward and backward with the exchange replaced
// by kernels/cuda's dispatch layout, permute and combine on one device. The expert-major rows
// get_dispatch_layout makes (expert, then token, then k) are the rows the one-rank exchange
// delivers (policy/expert_exchange.h's row order), so both layers feed the expert FFN the
// same rows in the same order. Several ranks (experts on other processes) need the expert
// plane on device memory, which does not exist yet: model_cuda.h refuses them.
//
// Host round trip: the grouped expert FFN sizes its per-expert cuBLAS GEMMs on the host
// (kernels_cuda.h: expert_offset is a host array), so forward copies the E + 1 row offsets
// back once per layer (one stream synchronisation per layer per forward or decode step).
// Built only when MOERL_HAVE_CUDA (library moerl_policy_cuda).
#pragma once

#include <cstdint>
#include <vector>

#include "common/error.h"
#include "policy/cuda/device_buffer.h"
#include "policy/moe_layer.h"

namespace moerl::policy::cuda {

// What forward keeps for backward (device buffers unless marked host).
struct moe_acts {
  int64_t num_tokens = 0;
  int64_t num_rows = 0;                    // expert-major rows = routed (token, k) entries
  device_buffer<float> scores;             // [n, E]
  device_buffer<int64_t> topk_idx;         // [n, k], -1 for padding tokens' slots
  device_buffer<float> topk_weights;       // [n, k]
  device_buffer<int64_t> slot;             // [n, k] expert-major row of entry (t, k), -1 unused
  device_buffer<float> recv_x;             // [rows, hidden] FFN input
  device_buffer<float> gate_up;            // [rows, 2F]
  device_buffer<float> act;                // [rows, F]
  device_buffer<float> recv_out;           // [rows, hidden] FFN output
  device_buffer<float> grad_scores_aux;    // [n, E] d(aux loss)/d(scores)
  std::vector<int64_t> expert_offset;      // host [E + 1]
  std::vector<int64_t> tokens_per_expert;  // host [E] (token, k) entries per expert
  // Scratch of get_dispatch_layout's other outputs, kept to reuse the allocation.
  device_buffer<int64_t> offset_dev, per_expert_dev, per_rank_dev;
  device_buffer<uint8_t> in_rank_dev;
};

class moe_layer {
 public:
  explicit moe_layer(const moe_shape& shape) : shape_(shape) {}
  const moe_shape& shape() const { return shape_; }

  // x [n, hidden] -> y [n, hidden]; token_mask [n] device (nullptr: all real). aux_loss: one
  // device float, the layer's load-balance loss (coefficient applied; 0 when it is off).
  status forward(cudaStream_t stream, const moe_weights& w, const float* x,
                 const uint8_t* token_mask, int64_t n, moe_acts* st, float* y, float* aux_loss);
  // dy [n, hidden] -> dx [n, hidden] (overwritten); weight gradients accumulate into g.
  status backward(cudaStream_t stream, const moe_weights& w, const float* x, const moe_acts& st,
                  const float* dy, float* dx, const moe_grads& g);

 private:
  moe_shape shape_;
};

}  // namespace moerl::policy::cuda
