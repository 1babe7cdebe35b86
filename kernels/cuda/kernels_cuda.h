// CUDA twins of the kernels/ primitives: the same names, parameters, layouts and semantics
// as the CPU headers (kernels/routing.h, load_stats.h, dispatch_layout.h, permute.h,
// combine.h, expert_ffn.h, dtypes.h), with a cudaStream_t instead of a thread_pool. One
// header for all twins because each declaration only restates its CPU twin; read the CPU
// header for the contract. All pointers are device pointers unless marked "host". Every
// function enqueues work on `stream` and returns without synchronising. Shapes are checked
// on the host as on the CPU; the data itself is not (that would need a device-to-host sync
// per call): expert ids outside [0, num_experts) are skipped by the routing, statistics and
// layout kernels, and slot maps must be what get_dispatch_layout produced (unique, in
// range). Check a table from an untrusted source with the CPU twin first.
// Built only when MOERL_HAVE_CUDA; include only from code compiled under that definition.
#pragma once

#include <cstdint>

#include "common/error.h"
#include "kernels/copy_rows.h"
#include "kernels/dispatch_layout.h"
#include "kernels/dtypes.h"
#include "kernels/expert_ffn.h"
#include "kernels/routing.h"

struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;

namespace moerl::kernels::cuda {

// True when a CUDA device is visible to this process (a missing driver counts as none).
bool device_available();

status route_forward(cudaStream_t stream, const routing_params& p, const float* logits,
                     const float* selection_bias, const uint8_t* token_mask, int64_t num_tokens,
                     float* scores, int64_t* topk_idx, float* topk_weights);
status route_backward(cudaStream_t stream, const routing_params& p, const float* scores,
                      const int64_t* topk_idx, const float* grad_topk_weights,
                      const float* grad_scores_extra, int64_t num_tokens, float* grad_logits);

status count_tokens_per_expert(cudaStream_t stream, const int64_t* topk_idx, int64_t num_tokens,
                               int topk, int num_experts, int64_t* tokens_per_expert);
// loss: device pointer to one float. Synchronises nothing; read it after the stream.
status load_balance_loss(cudaStream_t stream, const float* scores, const int64_t* topk_idx,
                         int64_t num_tokens, int num_experts, int topk, float coeff, float* loss,
                         float* grad_scores);

status get_dispatch_layout(cudaStream_t stream, const int64_t* topk_idx,
                           const dispatch_layout_params& p, const dispatch_layout_out& out);

status permute_forward(cudaStream_t stream, const float* x, const int64_t* token_expert_slot,
                       int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows,
                       float* permuted);
status permute_forward(cudaStream_t stream, const bf16* x, const int64_t* token_expert_slot,
                       int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows,
                       bf16* permuted);
status permute_backward(cudaStream_t stream, const float* grad_permuted,
                        const int64_t* token_expert_slot, int64_t num_tokens, int topk,
                        int64_t hidden, int64_t num_rows, float* grad_x);
status permute_backward(cudaStream_t stream, const bf16* grad_permuted,
                        const int64_t* token_expert_slot, int64_t num_tokens, int topk,
                        int64_t hidden, int64_t num_rows, bf16* grad_x);
status unpermute_forward(cudaStream_t stream, const float* permuted,
                         const int64_t* token_expert_slot, int64_t num_tokens, int topk,
                         int64_t hidden, int64_t num_rows, float* unpermuted);
status unpermute_forward(cudaStream_t stream, const bf16* permuted,
                         const int64_t* token_expert_slot, int64_t num_tokens, int topk,
                         int64_t hidden, int64_t num_rows, bf16* unpermuted);
status unpermute_backward(cudaStream_t stream, const float* grad_unpermuted,
                          const int64_t* token_expert_slot, int64_t num_tokens, int topk,
                          int64_t hidden, int64_t num_rows, float* grad_permuted);
status unpermute_backward(cudaStream_t stream, const bf16* grad_unpermuted,
                          const int64_t* token_expert_slot, int64_t num_tokens, int topk,
                          int64_t hidden, int64_t num_rows, bf16* grad_permuted);

status combine_forward(cudaStream_t stream, const float* expert_out,
                       const int64_t* token_expert_slot, const float* topk_weights,
                       int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows, float* out);
status combine_forward(cudaStream_t stream, const bf16* expert_out,
                       const int64_t* token_expert_slot, const float* topk_weights,
                       int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows, bf16* out);
// term_rows: a device array [num_tokens, width] of device row pointers (nullptr = no term).
status combine_rows_forward(cudaStream_t stream, const float* const* term_rows,
                            const float* weights, int64_t num_tokens, int width, int64_t hidden,
                            float* out);
status combine_rows_forward(cudaStream_t stream, const bf16* const* term_rows, const float* weights,
                            int64_t num_tokens, int width, int64_t hidden, bf16* out);
status combine_backward(cudaStream_t stream, const float* grad_out, const float* expert_out,
                        const int64_t* token_expert_slot, const float* topk_weights,
                        int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows,
                        float* grad_expert_out, float* grad_topk_weights);
status combine_backward(cudaStream_t stream, const bf16* grad_out, const bf16* expert_out,
                        const int64_t* token_expert_slot, const float* topk_weights,
                        int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows,
                        bf16* grad_expert_out, float* grad_topk_weights);

// expert_offset is a HOST array here: GEMM sizes are needed on the host to enqueue cuBLAS.
status expert_ffn_forward(cudaStream_t stream, const expert_ffn_shape& s,
                          const int64_t* expert_offset, const float* x, const float* w_gate_up,
                          const float* w_down, float* gate_up, float* act, float* out);
// bf16 storage, fp32 inside: converts to fp32 scratch (whole tensors, stream-ordered), runs
// the fp32 path, rounds the output once.
status expert_ffn_forward(cudaStream_t stream, const expert_ffn_shape& s,
                          const int64_t* expert_offset, const bf16* x, const bf16* w_gate_up,
                          const bf16* w_down, bf16* out);
status expert_ffn_backward(cudaStream_t stream, const expert_ffn_shape& s,
                           const int64_t* expert_offset, const float* x, const float* w_gate_up,
                           const float* w_down, const float* gate_up, const float* act,
                           const float* grad_out, float* grad_x, float* grad_w_gate_up,
                           float* grad_w_down, bool accumulate_weight_grads = false);

// copies is a HOST array (uploaded before the call returns, so it may be freed then); each
// copy's dst and src are addresses the device can reach (its memory, a peer's memory opened
// through CUDA IPC, or pinned host memory). One block per copy, 16-byte moves where the copy
// allows them.
status copy_rows(cudaStream_t stream, const row_copy* copies, int64_t num_copies);

status bf16_from_float(cudaStream_t stream, const float* x, int64_t n, bf16* y);
status bf16_to_float(cudaStream_t stream, const bf16* x, int64_t n, float* y);
status fp8_quantize(cudaStream_t stream, const float* x, int64_t num_rows, int64_t hidden,
                    uint8_t* q, float* scales);
status fp8_dequantize(cudaStream_t stream, const uint8_t* q, const float* scales, int64_t num_rows,
                      int64_t hidden, float* x);

}  // namespace moerl::kernels::cuda
