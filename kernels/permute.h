// Permute: gather token rows into the expert-major layout described by a token_expert_slot
// map (kernels/dispatch_layout.h), and unpermute: scatter expert-major rows back to
// (token, k) order. Both with their backward passes; fp32 and bf16 storage.
#pragma once

#include <cstdint>

#include "common/error.h"
#include "kernels/dtypes.h"
#include "kernels/thread_pool.h"

namespace moerl::kernels {

// Tensor layouts shared by every function here (row-major, rows of `hidden` elements):
//   x                 [num_tokens, hidden]     token rows
//   token_expert_slot [num_tokens, topk]       row of entry (t, k) in the expert-major
//                                              buffer, -1 = masked; rows not named by any
//                                              entry are padding
//   permuted          [num_rows, hidden]       expert-major buffer
//   unpermuted        [num_tokens, topk, hidden]
// A slot outside [-1, num_rows) is an invalid_argument error; the functions that fill rows
// by slot (permute_forward, unpermute_backward) also refuse a row named by two entries.

// permuted[slot[t, k]] = x[t]; padding rows are set to zero.
status permute_forward(thread_pool& pool, const float* x, const int64_t* token_expert_slot,
                       int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows,
                       float* permuted);
status permute_forward(thread_pool& pool, const bf16* x, const int64_t* token_expert_slot,
                       int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows,
                       bf16* permuted);

// grad_x[t] = sum over k = 0..topk-1 (in that order, fp32 accumulation, masked entries
// skipped) of grad_permuted[slot[t, k]].
status permute_backward(thread_pool& pool, const float* grad_permuted,
                        const int64_t* token_expert_slot, int64_t num_tokens, int topk,
                        int64_t hidden, int64_t num_rows, float* grad_x);
status permute_backward(thread_pool& pool, const bf16* grad_permuted,
                        const int64_t* token_expert_slot, int64_t num_tokens, int topk,
                        int64_t hidden, int64_t num_rows, bf16* grad_x);

// unpermuted[t, k] = permuted[slot[t, k]], or zeros for a masked entry.
status unpermute_forward(thread_pool& pool, const float* permuted, const int64_t* token_expert_slot,
                         int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows,
                         float* unpermuted);
status unpermute_forward(thread_pool& pool, const bf16* permuted, const int64_t* token_expert_slot,
                         int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows,
                         bf16* unpermuted);

// grad_permuted[slot[t, k]] = grad_unpermuted[t, k]; padding rows are set to zero.
status unpermute_backward(thread_pool& pool, const float* grad_unpermuted,
                          const int64_t* token_expert_slot, int64_t num_tokens, int topk,
                          int64_t hidden, int64_t num_rows, float* grad_permuted);
status unpermute_backward(thread_pool& pool, const bf16* grad_unpermuted,
                          const int64_t* token_expert_slot, int64_t num_tokens, int topk,
                          int64_t hidden, int64_t num_rows, bf16* grad_permuted);

}  // namespace moerl::kernels
