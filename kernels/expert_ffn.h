// Grouped expert FFN (SwiGLU) over the local experts of one rank, each with its own row
// count: h = x W_gate_up^T, a = silu(h_gate) * h_up, y = a W_down^T. Forward and backward;
// GEMMs through BLAS, one pair per expert, each split over the pool's threads. With a pool
// of more than one thread, OpenBLAS's process-wide thread count is held at 1 for the call
// (the pool is the parallelism) and restored afterwards; BLAS calls made meanwhile by other
// code in the process run single-threaded. A pool of one thread leaves BLAS's threads alone.
#pragma once

#include <cstdint>

#include "common/error.h"
#include "kernels/dtypes.h"
#include "kernels/thread_pool.h"

namespace moerl::kernels {

// Layouts (row-major; weights in torch.nn.Linear's [out_features, in_features] order):
//   expert_offset [num_experts + 1] host int64: expert e owns rows
//                 [expert_offset[e], expert_offset[e + 1]) of x; num_rows = expert_offset[E]
//                 (get_dispatch_layout's expert_offset restricted to the local experts and
//                 rebased to 0 works as is)
//   x            [num_rows, hidden]
//   w_gate_up    [num_experts, 2 * ffn_dim, hidden]: rows [0, ffn_dim) are the gate
//                projection, rows [ffn_dim, 2 * ffn_dim) the up projection
//   w_down       [num_experts, hidden, ffn_dim]
//   gate_up      [num_rows, 2 * ffn_dim] out: h, saved for backward
//   act          [num_rows, ffn_dim]     out: a, saved for backward
//   out          [num_rows, hidden]      out: y
// Experts with zero rows are skipped. Padding rows of zeros give zero outputs (no biases).
struct expert_ffn_shape {
  int num_experts = 0;
  int64_t hidden = 0;
  int64_t ffn_dim = 0;
};

status expert_ffn_forward(thread_pool& pool, const expert_ffn_shape& s,
                          const int64_t* expert_offset, const float* x, const float* w_gate_up,
                          const float* w_down, float* gate_up, float* act, float* out);

// bf16 storage for x, weights and out; fp32 GEMMs and activations inside (converted per
// expert), so results match the fp32 path up to bf16 rounding of inputs and output.
status expert_ffn_forward(thread_pool& pool, const expert_ffn_shape& s,
                          const int64_t* expert_offset, const bf16* x, const bf16* w_gate_up,
                          const bf16* w_down, bf16* out);

// Backward from grad_out [num_rows, hidden]:
//   grad_x         [num_rows, hidden] out
//   grad_w_gate_up [num_experts, 2 * ffn_dim, hidden] out
//   grad_w_down    [num_experts, hidden, ffn_dim] out
// Weight gradients overwrite their buffers, or add to them when accumulate_weight_grads is
// true (gradient accumulation over micro-batches). An expert with zero rows gets a zero
// (or unchanged) weight gradient.
status expert_ffn_backward(thread_pool& pool, const expert_ffn_shape& s,
                           const int64_t* expert_offset, const float* x, const float* w_gate_up,
                           const float* w_down, const float* gate_up, const float* act,
                           const float* grad_out, float* grad_x, float* grad_w_gate_up,
                           float* grad_w_down, bool accumulate_weight_grads = false);

}  // namespace moerl::kernels
