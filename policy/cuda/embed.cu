// CUDA twins of policy/dense_ops.cpp's embeddings and residual addition. Backward gives every
// parameter element to one thread that walks the batch's rows in the CPU loop's order, so the
// accumulated gradient rounds as on the CPU (no atomics, no reordering).
#include "policy/cuda/dense_ops_cuda.h"
#include "policy/cuda/device_common.cuh"

namespace moerl::policy::cuda {

using detail::check_ptr;
using detail::check_size;
using kernels::cuda::detail::blocks_for;

namespace {

__global__ void embed_forward_kernel(const float* tok_emb, const float* pos_emb,
                                     const token_id* tokens, int64_t n, int64_t t, int64_t pos0,
                                     int64_t d, float* x) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n * d;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / d, c = e % d;
    x[e] = tok_emb[int64_t(tokens[i]) * d + c] + pos_emb[(pos0 + i % t) * d + c];
  }
}

// Element (v, c) of g_tok: rows i with tokens[i] == v, in increasing i.
__global__ void embed_backward_tok(const token_id* tokens, const float* dx, int64_t n, int64_t d,
                                   float* g_tok) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < int64_t(num_vocab) * d;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t v = e / d, c = e % d;
    float acc = g_tok[e];
    for (int64_t i = 0; i < n; ++i)
      if (tokens[i] == v) acc += dx[i * d + c];
    g_tok[e] = acc;
  }
}

// Element (p, c) of g_pos: rows i = p, p + t, p + 2t, ...
__global__ void embed_backward_pos(const float* dx, int64_t n, int64_t t, int64_t d, float* g_pos) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < t * d;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t p = e / d, c = e % d;
    float acc = g_pos[e];
    for (int64_t i = p; i < n; i += t) acc += dx[i * d + c];
    g_pos[e] = acc;
  }
}

__global__ void add_inplace_kernel(float* x, const float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    x[i] += y[i];
}

}  // namespace

status embed_forward(cudaStream_t stream, const float* tok_emb, const float* pos_emb,
                     const token_id* tokens, int64_t n, int64_t t, int64_t pos0, int64_t d,
                     float* x) {
  const char* fn = "embed_forward";
  STATUS_TRY(check_size(fn, "n", n, INT64_MAX / 2));
  STATUS_TRY(check_size(fn, "d", d, INT64_MAX / 2));
  STATUS_TRY(check_size(fn, "pos0", pos0, INT64_MAX / 2));
  if (t < 1) return detail::bad_argument(fn, "t " + std::to_string(t) + " < 1");
  STATUS_TRY(check_ptr(fn, "tok_emb", tok_emb, num_vocab * d));
  STATUS_TRY(check_ptr(fn, "pos_emb", pos_emb, (pos0 + std::min(n, t)) * d));
  STATUS_TRY(check_ptr(fn, "tokens", tokens, n));
  STATUS_TRY(check_ptr(fn, "x", x, n * d));
  if (n == 0 || d == 0) return ok_status();
  embed_forward_kernel<<<blocks_for(n * d, 256), 256, 0, stream>>>(tok_emb, pos_emb, tokens, n, t,
                                                                   pos0, d, x);
  CUDA_CHECK_LAUNCH();
  return ok_status();
}

status embed_backward(cudaStream_t stream, const token_id* tokens, const float* dx, int64_t n,
                      int64_t t, int64_t d, float* g_tok, float* g_pos) {
  const char* fn = "embed_backward";
  STATUS_TRY(check_size(fn, "n", n, INT64_MAX / 2));
  STATUS_TRY(check_size(fn, "d", d, INT64_MAX / 2));
  if (t < 1) return detail::bad_argument(fn, "t " + std::to_string(t) + " < 1");
  STATUS_TRY(check_ptr(fn, "tokens", tokens, n));
  STATUS_TRY(check_ptr(fn, "dx", dx, n * d));
  STATUS_TRY(check_ptr(fn, "g_tok", g_tok, num_vocab * d));
  STATUS_TRY(check_ptr(fn, "g_pos", g_pos, std::min(n, t) * d));
  if (n == 0 || d == 0) return ok_status();
  embed_backward_tok<<<blocks_for(num_vocab * d, 128), 128, 0, stream>>>(tokens, dx, n, d, g_tok);
  CUDA_CHECK_LAUNCH();
  const int64_t rows = std::min(n, t);  // positions past n hold no row
  embed_backward_pos<<<blocks_for(rows * d, 128), 128, 0, stream>>>(dx, n, rows, d, g_pos);
  CUDA_CHECK_LAUNCH();
  return ok_status();
}

status add_inplace(cudaStream_t stream, float* x, const float* y, int64_t n) {
  const char* fn = "add_inplace";
  STATUS_TRY(check_size(fn, "n", n, INT64_MAX / 2));
  STATUS_TRY(check_ptr(fn, "x", x, n));
  STATUS_TRY(check_ptr(fn, "y", y, n));
  if (n == 0) return ok_status();
  add_inplace_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(x, y, n);
  CUDA_CHECK_LAUNCH();
  return ok_status();
}

}  // namespace moerl::policy::cuda
