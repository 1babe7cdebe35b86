// CUDA twins of the policy's dense ops (policy/dense_ops.h): the same names, parameters,
// layouts and semantics, plus a cudaStream_t first; read the CPU header for each contract
// (which outputs are overwritten and which accumulate). All pointers are device pointers.
// Every function enqueues work on `stream` and returns without synchronising; the caller
// keeps its buffers alive until the stream has run it.
//
// Where the twins differ from the CPU, and by how much (tests/policy/cuda_twins_test.cpp):
//   - linear_forward/backward run through cuBLAS (full fp32, no TF32; the calling thread's
//     handle, as kernels/cuda's expert FFN) where the CPU runs OpenBLAS: the two sum the
//     products in different orders, so results agree to a relative 1e-5 of the output's
//     magnitude, not bitwise.
//   - attention_forward/decode and log_softmax_row compute exp with CUDA's expf/exp (within
//     2 ulp) where the CPU calls glibc's: probabilities and outputs agree to a relative 1e-5.
//   - rmsnorm_forward/backward and attention_backward sum in the CPU's order (one thread per
//     row or column walking it as the CPU loop does, in double where the CPU uses double) and
//     the library is built with -fmad=false (no fused multiply-adds the CPU build never
//     makes): designed to give the CPU's bits, tested to a relative 1e-6.
// Shapes are checked on the host: a negative size, a head count that does not split the
// width, a decode position outside the cache, a size past cuBLAS's int range or a null
// pointer for a non-empty tensor return errc::invalid_argument naming the function and the
// argument; CUDA and cuBLAS failures return errc::cuda_error naming the call.
// Built only when MOERL_HAVE_CUDA (library moerl_policy_cuda); include only from code compiled
// under that definition.
#pragma once

#include <cstdint>

#include "common/error.h"
#include "policy/vocab.h"

struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;

namespace moerl::policy::cuda {

// y[n, d_out] = x[n, d_in] * w[d_in, d_out]
status linear_forward(cudaStream_t stream, const float* x, const float* w, int64_t n, int64_t d_in,
                      int64_t d_out, float* y);
// dx[n, d_in] = dy * w^T (overwritten; skipped when dx is null); dw += x^T * dy
status linear_backward(cudaStream_t stream, const float* x, const float* w, const float* dy,
                       int64_t n, int64_t d_in, int64_t d_out, float* dx, float* dw);

// y = x * inv_rms * g, inv_rms[row] = 1 / sqrt(mean(x^2) + rmsnorm_eps) (kept for backward).
status rmsnorm_forward(cudaStream_t stream, const float* x, const float* g, int64_t n, int64_t d,
                       float* y, float* inv_rms);
// dx += , dg += (both accumulate, as on the CPU).
status rmsnorm_backward(cudaStream_t stream, const float* x, const float* g, const float* inv_rms,
                        const float* dy, int64_t n, int64_t d, float* dx, float* dg);

// Causal multi-head attention; qkv [b * t, 3 * d], probs [b, num_heads, t, t] (zero past the
// diagonal), out [b * t, d], d = num_heads * d_head.
status attention_forward(cudaStream_t stream, const float* qkv, int64_t b, int64_t t, int num_heads,
                         int d_head, float* probs, float* out);
// dqkv [b * t, 3 * d] overwritten.
status attention_backward(cudaStream_t stream, const float* qkv, const float* probs,
                          const float* dout, int64_t b, int64_t t, int num_heads, int d_head,
                          float* dqkv);
// q [b, d] against positions 0..pos of k_cache, v_cache [b, max_len, d]; out [b, d].
status attention_decode(cudaStream_t stream, const float* q, const float* k_cache,
                        const float* v_cache, int64_t b, int64_t max_len, int64_t pos,
                        int num_heads, int d_head, float* out);

// Embeddings (policy/dense_ops.h): tokens are device token ids, checked on the host only for
// shape (an id outside the vocabulary reads out of bounds: the device policy checks ids on the
// host before uploading them). embed_backward adds each row's gradient in increasing row order
// per element (one thread per parameter element walks the rows), as the CPU: the same bits.
status embed_forward(cudaStream_t stream, const float* tok_emb, const float* pos_emb,
                     const token_id* tokens, int64_t n, int64_t t, int64_t pos0, int64_t d,
                     float* x);
status embed_backward(cudaStream_t stream, const token_id* tokens, const float* dx, int64_t n,
                      int64_t t, int64_t d, float* g_tok, float* g_pos);
// x[i] += y[i] for i < n (one rounding each, as the CPU).
status add_inplace(cudaStream_t stream, float* x, const float* y, int64_t n);

// out[v] = log softmax(logits / temperature)[v] over one row of n values (temperature > 0).
status log_softmax_row(cudaStream_t stream, const float* logits, int n, float temperature,
                       float* out);

}  // namespace moerl::policy::cuda
