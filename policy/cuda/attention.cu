// CUDA twin of policy/dense_ops.cpp's causal attention. One block per query row (forward,
// backward's dq) or key row (backward's dk, dv) or decoded sequence-head; the block's threads
// split the independent dot products, and every sum the CPU takes in a loop (the softmax's
// max and denominator, each output element) is taken in the CPU's order by one thread, so
// only exp's last bits can differ from the CPU (see dense_ops_cuda.h).
#include <algorithm>
#include <climits>
#include <cmath>

#include "policy/cuda/dense_ops_cuda.h"
#include "policy/cuda/device_common.cuh"

namespace moerl::policy::cuda {

using detail::check_ptr;
using detail::check_size;

namespace {

constexpr int kThreads = 128;

__device__ __forceinline__ float dot(const float* a, const float* b, int n) {
  float acc = 0;
  for (int c = 0; c < n; ++c) acc += a[c] * b[c];
  return acc;
}

// Softmax of p[0..len) in place, the CPU's way: the running max (std::max's comparison),
// exponentials, their sum in index order, then a division.
__device__ void softmax_in_place(float* p, int64_t len) {
  __shared__ float mx_s, sum_s;
  if (threadIdx.x == 0) {
    float mx = -INFINITY;
    for (int64_t j = 0; j < len; ++j) mx = mx < p[j] ? p[j] : mx;
    mx_s = mx;
  }
  __syncthreads();
  for (int64_t j = threadIdx.x; j < len; j += blockDim.x) p[j] = expf(p[j] - mx_s);
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0;
    for (int64_t j = 0; j < len; ++j) sum += p[j];
    sum_s = sum;
  }
  __syncthreads();
  for (int64_t j = threadIdx.x; j < len; j += blockDim.x) p[j] /= sum_s;
  __syncthreads();
}

// Block (s, h, i) = blockIdx.x = (s * H + h) * t + i: probability row i of head h, and the
// head's slice of out's row i.
__global__ void attention_forward_kernel(const float* qkv, int64_t t, int H, int dh, float scale,
                                         float* probs, float* out) {
  const int64_t rid = blockIdx.x, i = rid % t, sh = rid / t, s = sh / H;
  const int h = static_cast<int>(sh % H);
  const int64_t d = int64_t(H) * dh, row = 3 * d;
  float* p = probs + rid * t;
  const float* q = qkv + (s * t + i) * row + h * dh;
  for (int64_t j = threadIdx.x; j < t; j += blockDim.x)
    p[j] = j <= i ? dot(q, qkv + (s * t + j) * row + d + h * dh, dh) * scale : 0.0f;
  __syncthreads();
  softmax_in_place(p, i + 1);
  for (int c = threadIdx.x; c < dh; c += blockDim.x) {
    float o = 0;
    for (int64_t j = 0; j <= i; ++j) o += p[j] * qkv[(s * t + j) * row + 2 * d + h * dh + c];
    out[(s * t + i) * d + h * dh + c] = o;
  }
}

// Query row i: dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik) scale with dP_ij = dO_i . V_j, kept in
// ds (laid out as probs) for the key rows' pass; then dq_i = sum_j dS_ij k_j.
__global__ void attention_backward_query(const float* qkv, const float* probs, const float* dout,
                                         int64_t t, int H, int dh, float scale, float* ds,
                                         float* dqkv) {
  const int64_t rid = blockIdx.x, i = rid % t, sh = rid / t, s = sh / H;
  const int h = static_cast<int>(sh % H);
  const int64_t d = int64_t(H) * dh, row = 3 * d;
  const float* p = probs + rid * t;
  float* dsr = ds + rid * t;
  const float* go = dout + (s * t + i) * d + h * dh;
  for (int64_t j = threadIdx.x; j < t; j += blockDim.x)
    dsr[j] = j <= i ? dot(go, qkv + (s * t + j) * row + 2 * d + h * dh, dh) : 0.0f;
  __syncthreads();
  __shared__ float rowdot_s;
  if (threadIdx.x == 0) {
    float rowdot = 0;
    for (int64_t j = 0; j <= i; ++j) rowdot += dsr[j] * p[j];
    rowdot_s = rowdot;
  }
  __syncthreads();
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x)
    dsr[j] = p[j] * (dsr[j] - rowdot_s) * scale;
  __syncthreads();
  for (int c = threadIdx.x; c < dh; c += blockDim.x) {
    float acc = 0;
    for (int64_t j = 0; j <= i; ++j) acc += dsr[j] * qkv[(s * t + j) * row + d + h * dh + c];
    dqkv[(s * t + i) * row + h * dh + c] = acc;
  }
}

// Key row j: dv_j = sum_{i >= j} P_ij dO_i and dk_j = sum_{i >= j} dS_ij q_i, queries in order
// as the CPU's outer loop adds them.
__global__ void attention_backward_key(const float* qkv, const float* probs, const float* dout,
                                       const float* ds, int64_t t, int H, int dh, float* dqkv) {
  const int64_t rid = blockIdx.x, j = rid % t, sh = rid / t, s = sh / H;
  const int h = static_cast<int>(sh % H);
  const int64_t d = int64_t(H) * dh, row = 3 * d;
  for (int c = threadIdx.x; c < dh; c += blockDim.x) {
    float dv = 0, dk = 0;
    for (int64_t i = j; i < t; ++i) {
      dv += probs[(sh * t + i) * t + j] * dout[(s * t + i) * d + h * dh + c];
      dk += ds[(sh * t + i) * t + j] * qkv[(s * t + i) * row + h * dh + c];
    }
    dqkv[(s * t + j) * row + 2 * d + h * dh + c] = dv;
    dqkv[(s * t + j) * row + d + h * dh + c] = dk;
  }
}

// Block s * H + h: scores in p (pos + 1 of them), softmax, then the weighted values.
__global__ void attention_decode_kernel(const float* q, const float* k_cache, const float* v_cache,
                                        int64_t max_len, int64_t pos, int H, int dh, float scale,
                                        float* scores, float* out) {
  const int64_t sh = blockIdx.x, s = sh / H;
  const int h = static_cast<int>(sh % H);
  const int64_t d = int64_t(H) * dh;
  float* p = scores + sh * (pos + 1);
  const float* qs = q + s * d + h * dh;
  for (int64_t j = threadIdx.x; j <= pos; j += blockDim.x)
    p[j] = dot(qs, k_cache + (s * max_len + j) * d + h * dh, dh) * scale;
  __syncthreads();
  // The CPU divides each weight by the sum as it uses it; softmax_in_place divides first:
  // the same quotient either way.
  softmax_in_place(p, pos + 1);
  for (int c = threadIdx.x; c < dh; c += blockDim.x) {
    float o = 0;
    for (int64_t j = 0; j <= pos; ++j) o += p[j] * v_cache[(s * max_len + j) * d + h * dh + c];
    out[s * d + h * dh + c] = o;
  }
}

// Shapes shared by the three functions: b >= 0, t >= 0, heads and head width >= 1, and one
// block per (sequence, head, row) within a grid's x dimension.
status check_heads(const char* fn, int64_t b, int64_t t, int num_heads, int d_head) {
  STATUS_TRY(check_size(fn, "b", b));
  STATUS_TRY(check_size(fn, "t", t));
  if (num_heads < 1)
    return detail::bad_argument(fn, "num_heads " + std::to_string(num_heads) + " < 1");
  if (d_head < 1) return detail::bad_argument(fn, "d_head " + std::to_string(d_head) + " < 1");
  // In double: the int64 product of three int-sized factors could wrap.
  if (double(b) * num_heads * double(std::max<int64_t>(t, 1)) > INT_MAX)
    return detail::bad_argument(fn, "b " + std::to_string(b) + " x num_heads " +
                                        std::to_string(num_heads) + " x t " + std::to_string(t) +
                                        " blocks exceed the grid's " + std::to_string(INT_MAX));
  return ok_status();
}

}  // namespace

status attention_forward(cudaStream_t stream, const float* qkv, int64_t b, int64_t t, int num_heads,
                         int d_head, float* probs, float* out) {
  const char* fn = "attention_forward";
  STATUS_TRY(check_heads(fn, b, t, num_heads, d_head));
  const int64_t d = int64_t(num_heads) * d_head;
  STATUS_TRY(check_ptr(fn, "qkv", qkv, b * t * 3 * d));
  STATUS_TRY(check_ptr(fn, "probs", probs, b * num_heads * t * t));
  STATUS_TRY(check_ptr(fn, "out", out, b * t * d));
  if (b == 0 || t == 0) return ok_status();
  attention_forward_kernel<<<unsigned(b * num_heads * t), kThreads, 0, stream>>>(
      qkv, t, num_heads, d_head, 1.0f / std::sqrt(float(d_head)), probs, out);
  CUDA_CHECK_LAUNCH();
  return ok_status();
}

status attention_backward(cudaStream_t stream, const float* qkv, const float* probs,
                          const float* dout, int64_t b, int64_t t, int num_heads, int d_head,
                          float* dqkv) {
  const char* fn = "attention_backward";
  STATUS_TRY(check_heads(fn, b, t, num_heads, d_head));
  const int64_t d = int64_t(num_heads) * d_head;
  STATUS_TRY(check_ptr(fn, "qkv", qkv, b * t * 3 * d));
  STATUS_TRY(check_ptr(fn, "probs", probs, b * num_heads * t * t));
  STATUS_TRY(check_ptr(fn, "dout", dout, b * t * d));
  STATUS_TRY(check_ptr(fn, "dqkv", dqkv, b * t * 3 * d));
  if (b == 0 || t == 0) return ok_status();
  kernels::cuda::detail::scratch<float> ds(stream, b * num_heads * t * t);
  CUDA_CHECK(ds.error());
  const float scale = 1.0f / std::sqrt(float(d_head));
  const unsigned blocks = unsigned(b * num_heads * t);
  attention_backward_query<<<blocks, kThreads, 0, stream>>>(qkv, probs, dout, t, num_heads, d_head,
                                                            scale, ds.get(), dqkv);
  CUDA_CHECK_LAUNCH();
  attention_backward_key<<<blocks, kThreads, 0, stream>>>(qkv, probs, dout, ds.get(), t, num_heads,
                                                          d_head, dqkv);
  CUDA_CHECK_LAUNCH();
  return ok_status();
}

status attention_decode(cudaStream_t stream, const float* q, const float* k_cache,
                        const float* v_cache, int64_t b, int64_t max_len, int64_t pos,
                        int num_heads, int d_head, float* out) {
  const char* fn = "attention_decode";
  STATUS_TRY(check_heads(fn, b, 1, num_heads, d_head));
  STATUS_TRY(check_size(fn, "max_len", max_len, INT64_MAX / 2));
  if (pos < 0 || pos >= max_len)
    return detail::bad_argument(fn, "pos " + std::to_string(pos) + " is outside the cache's 0.." +
                                        std::to_string(max_len - 1));
  const int64_t d = int64_t(num_heads) * d_head;
  STATUS_TRY(check_ptr(fn, "q", q, b * d));
  STATUS_TRY(check_ptr(fn, "k_cache", k_cache, b * max_len * d));
  STATUS_TRY(check_ptr(fn, "v_cache", v_cache, b * max_len * d));
  STATUS_TRY(check_ptr(fn, "out", out, b * d));
  if (b == 0) return ok_status();
  kernels::cuda::detail::scratch<float> scores(stream, b * num_heads * (pos + 1));
  CUDA_CHECK(scores.error());
  attention_decode_kernel<<<unsigned(b * num_heads), kThreads, 0, stream>>>(
      q, k_cache, v_cache, max_len, pos, num_heads, d_head, 1.0f / std::sqrt(float(d_head)),
      scores.get(), out);
  CUDA_CHECK_LAUNCH();
  return ok_status();
}

}  // namespace moerl::policy::cuda
