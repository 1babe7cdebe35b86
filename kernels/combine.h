// Weighted combine: each token's output is the weighted sum of its top-k expert outputs,
// read straight from the expert-major buffer (unpermute and reduction fused), plus the
// backward pass to expert outputs and to the weights. fp32 and bf16 storage.
#pragma once

#include <cstdint>

#include "common/error.h"
#include "kernels/dtypes.h"
#include "kernels/thread_pool.h"

namespace moerl::kernels {

// Layouts (row-major):
//   expert_out        [num_rows, hidden]   expert-major expert outputs
//   token_expert_slot [num_tokens, topk]   from get_dispatch_layout, -1 = masked
//   topk_weights      [num_tokens, topk]   fp32 combine weights (route_forward)
//   out               [num_tokens, hidden]
//
// out[t] = sum over k of topk_weights[t, k] * expert_out[slot[t, k]], accumulated in fp32
// in the fixed order k = 0, 1, ..., topk - 1 (masked entries skipped, a token with no
// entries gets zeros), rounded to the storage type once at the end. Every output row is
// computed by one thread in that order, so results are bitwise identical run to run and
// for any pool size.
status combine_forward(thread_pool& pool, const float* expert_out, const int64_t* token_expert_slot,
                       const float* topk_weights, int64_t num_tokens, int topk, int64_t hidden,
                       int64_t num_rows, float* out);
status combine_forward(thread_pool& pool, const bf16* expert_out, const int64_t* token_expert_slot,
                       const float* topk_weights, int64_t num_tokens, int topk, int64_t hidden,
                       int64_t num_rows, bf16* out);

// The same reduction with each term given as a row pointer: out[t] = sum over j of
// weights[t, j] * term_rows[t, j] (nullptr = no term), j = 0, 1, ..., width - 1, with
// combine_forward's accumulation and single rounding (combine_forward is this with
// term_rows[t, k] = expert_out + slot[t, k] * hidden). For terms that lie in several buffers:
// fabric's low-latency combine reads expert outputs in place in same-host peers' memory (on
// device memory through the CUDA twin, kernels/cuda/kernels_cuda.h).
status combine_rows_forward(thread_pool& pool, const float* const* term_rows, const float* weights,
                            int64_t num_tokens, int width, int64_t hidden, float* out);
status combine_rows_forward(thread_pool& pool, const bf16* const* term_rows, const float* weights,
                            int64_t num_tokens, int width, int64_t hidden, bf16* out);

// Slots outside [-1, num_rows) are invalid_argument errors; combine_backward, which writes
// rows by slot, also refuses a row named by two entries.
//
// Backward:
//   grad_out          [num_tokens, hidden]
//   grad_expert_out   [num_rows, hidden] out: row slot[t, k] = topk_weights[t, k] * grad_out[t];
//                     padding rows zero
//   grad_topk_weights [num_tokens, topk] out (fp32): dot(grad_out[t], expert_out[slot[t, k]])
//                     in fp32 with 8 interleaved partial sums folded in a fixed order
//                     (reproducible); 0 for masked entries
status combine_backward(thread_pool& pool, const float* grad_out, const float* expert_out,
                        const int64_t* token_expert_slot, const float* topk_weights,
                        int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows,
                        float* grad_expert_out, float* grad_topk_weights);
status combine_backward(thread_pool& pool, const bf16* grad_out, const bf16* expert_out,
                        const int64_t* token_expert_slot, const float* topk_weights,
                        int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows,
                        bf16* grad_expert_out, float* grad_topk_weights);

}  // namespace moerl::kernels
