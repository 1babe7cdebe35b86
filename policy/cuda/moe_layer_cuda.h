// The policy's MoE layer on the device: policy/moe_layer.h's forward and backward. Two ways to
// reach the experts:
//   - one rank holding every expert (no exchange given): the exchange is replaced by
//     kernels/cuda's dispatch layout, permute and combine on one device. The expert-major rows
//     get_dispatch_layout makes (expert, then token, then k) are the rows the one-rank exchange
//     delivers (policy/expert_exchange.h's row order), so both layers feed the expert FFN the
//     same rows in the same order.
//   - several ranks (a device_expert_exchange given, device_expert_exchange.h): the CPU
//     layer's sequence exactly (dispatch, grouped FFN on this rank's experts, combine;
//     backward dispatch_cached, a one-term combine_backward per received row,
//     dispatch_backward), each step the CUDA twin of the CPU's, with the exchange's calls in
//     the same order (its collective contract).
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
#include "policy/cuda/device_expert_exchange.h"
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
  // Several ranks only: the exchange's handle (host), its received rows' routing weights on
  // the device, and the identity row map backward's one-term combine_backward takes.
  exchange_handle handle;
  device_buffer<float> recv_weights;   // [rows]
  device_buffer<int64_t> own_row;      // [rows] 0, 1, ...
  std::vector<int64_t> topk_idx_host;  // [n, k] (tokens_per_expert counts it)
};

class moe_layer {
 public:
  // exchange null: this rank holds every expert. Otherwise it holds num_experts /
  // exchange->num_ranks() of them and reaches the rest through *exchange (kept, not owned).
  explicit moe_layer(const moe_shape& shape, device_expert_exchange* exchange = nullptr)
      : shape_(shape), exchange_(exchange) {}
  const moe_shape& shape() const { return shape_; }
  int num_local_experts() const {
    return exchange_ ? shape_.num_experts / exchange_->num_ranks() : shape_.num_experts;
  }

  // x [n, hidden] -> y [n, hidden]; token_mask [n] device (nullptr: all real). aux_loss: one
  // device float, the layer's load-balance loss (coefficient applied; 0 when it is off).
  // mode: which of the exchange's modes (training and prefill normal, decode low_latency, as
  // the CPU policy); unused by one rank.
  status forward(cudaStream_t stream, const moe_weights& w, const float* x,
                 const uint8_t* token_mask, int64_t n, moe_acts* st, float* y, float* aux_loss,
                 exchange_mode mode = exchange_mode::normal);
  // dy [n, hidden] -> dx [n, hidden] (overwritten); weight gradients accumulate into g.
  status backward(cudaStream_t stream, const moe_weights& w, const float* x, const moe_acts& st,
                  const float* dy, float* dx, const moe_grads& g,
                  exchange_mode mode = exchange_mode::normal);

 private:
  // Router GEMM and routing into st's scores, topk_idx and topk_weights (both ways).
  status route(cudaStream_t stream, const moe_weights& w, const float* x, const uint8_t* token_mask,
               int64_t n, moe_acts* st);
  // From the routing to the expert rows and y: one rank (kernels) or the exchange.
  status experts_local(cudaStream_t stream, const moe_weights& w, const float* x, int64_t n,
                       moe_acts* st, float* y);
  status experts_exchanged(cudaStream_t stream, const moe_weights& w, const float* x, int64_t n,
                           exchange_mode mode, moe_acts* st, float* y);
  // Backward from dy to dx (overwritten) and grad_topk_w [n, k] through the experts.
  status experts_local_backward(cudaStream_t stream, const moe_weights& w, const moe_acts& st,
                                const float* dy, float* dx, float* grad_topk_w, const moe_grads& g);
  status experts_exchanged_backward(cudaStream_t stream, const moe_weights& w, const moe_acts& st,
                                    const float* dy, exchange_mode mode, float* dx,
                                    float* grad_topk_w, const moe_grads& g);
  moe_shape shape_;
  device_expert_exchange* exchange_ = nullptr;
};

}  // namespace moerl::policy::cuda
