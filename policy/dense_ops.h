// The dense (non-expert) pieces of the policy, forward and backward, on the CPU: linear
// maps through BLAS, RMSNorm, causal multi-head attention (full-sequence for training, one
// position at a time against a KV cache for generation), log-softmax. fp32 throughout.
// Backward functions ACCUMULATE into parameter gradients (dW, dg) and OVERWRITE input
// gradients (dx) unless documented otherwise. Row-major everywhere. CUDA twins with the same
// contracts: policy/cuda/dense_ops_cuda.h (their tolerances against these, and why).
#pragma once

#include <cstdint>

#include "policy/vocab.h"

namespace moerl::policy {

// y[n, d_out] = x[n, d_in] * w[d_in, d_out]
void linear_forward(const float* x, const float* w, int64_t n, int64_t d_in, int64_t d_out,
                    float* y);
// dx[n, d_in] = dy * w^T (overwritten; skipped when dx is null); dw += x^T * dy
void linear_backward(const float* x, const float* w, const float* dy, int64_t n, int64_t d_in,
                     int64_t d_out, float* dx, float* dw);

constexpr float rmsnorm_eps = 1e-5f;
// y = x * inv_rms * g with inv_rms[row] = 1 / sqrt(mean(x^2) + eps), kept for backward.
void rmsnorm_forward(const float* x, const float* g, int64_t n, int64_t d, float* y,
                     float* inv_rms);
// dx += (accumulated: the residual stream already carries a gradient); dg += .
void rmsnorm_backward(const float* x, const float* g, const float* inv_rms, const float* dy,
                      int64_t n, int64_t d, float* dx, float* dg);

// Causal attention over batch-major sequences.
//   qkv   [b * t, 3 * d]: per row the query, key and value, each d = num_heads * d_head
//   probs [b, num_heads, t, t] out: attention weights (row i is zero past column i)
//   out   [b * t, d] out: heads concatenated
void attention_forward(const float* qkv, int64_t b, int64_t t, int num_heads, int d_head,
                       float* probs, float* out);
// dqkv [b * t, 3 * d] overwritten.
void attention_backward(const float* qkv, const float* probs, const float* dout, int64_t b,
                        int64_t t, int num_heads, int d_head, float* dqkv);
// One decode step: row r of q [b, d] attends to positions 0..pos of its cache rows
//   k_cache, v_cache [b, max_len, d] (position pos already written). out [b, d].
void attention_decode(const float* q, const float* k_cache, const float* v_cache, int64_t b,
                      int64_t max_len, int64_t pos, int num_heads, int d_head, float* out);

// Embeddings: x[i] = tok_emb[tokens[i]] + pos_emb[pos0 + i % t] for rows i of [n, d]
// (training: pos0 = 0, t the sequence length; a decode step: t = 1, pos0 its position).
void embed_forward(const float* tok_emb, const float* pos_emb, const token_id* tokens, int64_t n,
                   int64_t t, int64_t pos0, int64_t d, float* x);
// g_tok[tokens[i]] += dx[i] and g_pos[i % t] += dx[i], rows i in increasing order (both
// accumulate; the order is part of the contract: the CUDA twin adds in it too).
void embed_backward(const token_id* tokens, const float* dx, int64_t n, int64_t t, int64_t d,
                    float* g_tok, float* g_pos);
// x[i] += y[i] for i < n: the residual stream's additions.
void add_inplace(float* x, const float* y, int64_t n);

// Sets the process-wide BLAS thread count. The policy's GEMMs are small (tens of rows by
// tens of columns per call), so BLAS threads only add spinning; on a shared 2-core machine
// a single thread measured 2x faster in wall time. Process-wide: call it from main().
void set_blas_threads(int num_threads);

// out[v] = log softmax(logits / temperature)[v] over one row of n values.
void log_softmax_row(const float* logits, int n, float temperature, float* out);

}  // namespace moerl::policy
