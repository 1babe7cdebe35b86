// CUDA twins of policy/dense_ops.cpp's linear maps, RMSNorm and log-softmax (attention is in
// attention.cu). GEMMs go through cuBLAS with the CPU's cblas_sgemm arguments; RMSNorm walks
// each row (forward, dx) or column (dg) in one thread, in the CPU loop's order and precision.
#include <cmath>

#include "policy/cuda/dense_ops_cuda.h"
#include "policy/cuda/device_common.cuh"
#include "policy/dense_ops.h"

namespace moerl::policy::cuda {

using detail::check_ptr;
using detail::check_size;
using kernels::cuda::detail::blocks_for;

namespace {

__global__ void rmsnorm_forward_kernel(const float* x, const float* g, int64_t n, int64_t d,
                                       float* y, float* inv_rms) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < n;
       r += int64_t(gridDim.x) * blockDim.x) {
    const float* xr = x + r * d;
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += double(xr[i]) * xr[i];
    const float inv = 1.0f / sqrtf(float(ss / d) + rmsnorm_eps);
    inv_rms[r] = inv;
    for (int64_t i = 0; i < d; ++i) y[r * d + i] = xr[i] * inv * g[i];
  }
}

// dx: one thread per row (the row's dot product first, as the CPU).
__global__ void rmsnorm_backward_rows(const float* x, const float* g, const float* inv_rms,
                                      const float* dy, int64_t n, int64_t d, float* dx) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < n;
       r += int64_t(gridDim.x) * blockDim.x) {
    const float* xr = x + r * d;
    const float* dyr = dy + r * d;
    const float inv = inv_rms[r];
    double dot = 0;
    for (int64_t i = 0; i < d; ++i) dot += double(g[i]) * dyr[i] * xr[i];
    const float c = float(dot) * inv * inv * inv / float(d);
    for (int64_t i = 0; i < d; ++i) dx[r * d + i] += g[i] * dyr[i] * inv - xr[i] * c;
  }
}

// dg: one thread per column, rows in order (the CPU adds row after row into dg).
__global__ void rmsnorm_backward_cols(const float* x, const float* inv_rms, const float* dy,
                                      int64_t n, int64_t d, float* dg) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < d;
       i += int64_t(gridDim.x) * blockDim.x) {
    float acc = dg[i];
    for (int64_t r = 0; r < n; ++r) acc += dy[r * d + i] * x[r * d + i] * inv_rms[r];
    dg[i] = acc;
  }
}

constexpr int kSoftmaxThreads = 256;

struct max_op {  // std::max's comparison, as the CPU's running maximum
  __device__ float operator()(float a, float b) const { return a < b ? b : a; }
};
struct sum_op {
  __device__ double operator()(double a, double b) const { return a + b; }
};

// One block. The maximum is exact in any order; the sum of exponentials is taken in double as
// on the CPU (a different order moves it by double rounding only).
__global__ void log_softmax_row_kernel(const float* logits, int n, float temperature, float* out) {
  __shared__ float smax[kSoftmaxThreads];
  __shared__ double ssum[kSoftmaxThreads];
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < n; i += kSoftmaxThreads) mx = max_op()(mx, logits[i] / temperature);
  mx = detail::block_reduce<kSoftmaxThreads>(mx, smax, max_op());
  double sum = 0;
  for (int i = threadIdx.x; i < n; i += kSoftmaxThreads)
    sum += exp(double(logits[i] / temperature - mx));
  sum = detail::block_reduce<kSoftmaxThreads>(sum, ssum, sum_op());
  const float lse = mx + float(log(sum));
  for (int i = threadIdx.x; i < n; i += kSoftmaxThreads) out[i] = logits[i] / temperature - lse;
}

}  // namespace

status linear_forward(cudaStream_t stream, const float* x, const float* w, int64_t n, int64_t d_in,
                      int64_t d_out, float* y) {
  const char* fn = "linear_forward";
  STATUS_TRY(check_size(fn, "n", n));
  STATUS_TRY(check_size(fn, "d_in", d_in));
  STATUS_TRY(check_size(fn, "d_out", d_out));
  STATUS_TRY(check_ptr(fn, "x", x, n * d_in));
  STATUS_TRY(check_ptr(fn, "w", w, d_in * d_out));
  STATUS_TRY(check_ptr(fn, "y", y, n * d_out));
  if (n == 0 || d_out == 0) return ok_status();
  // An empty inner dimension makes y an empty sum (cuBLAS refuses a leading dimension of 0).
  if (d_in == 0) {
    CUDA_CHECK(cudaMemsetAsync(y, 0, sizeof(float) * n * d_out, stream));
    return ok_status();
  }
  cublasHandle_t h;
  STATUS_TRY(kernels::cuda::detail::cublas_handle(stream, &h));
  return kernels::cuda::detail::rm_sgemm(h, false, false, int(n), int(d_out), int(d_in), 1.0f, x,
                                         int(d_in), w, int(d_out), 0.0f, y, int(d_out));
}

status linear_backward(cudaStream_t stream, const float* x, const float* w, const float* dy,
                       int64_t n, int64_t d_in, int64_t d_out, float* dx, float* dw) {
  const char* fn = "linear_backward";
  STATUS_TRY(check_size(fn, "n", n));
  STATUS_TRY(check_size(fn, "d_in", d_in));
  STATUS_TRY(check_size(fn, "d_out", d_out));
  STATUS_TRY(check_ptr(fn, "x", x, n * d_in));
  STATUS_TRY(check_ptr(fn, "w", w, d_in * d_out));
  STATUS_TRY(check_ptr(fn, "dy", dy, n * d_out));
  STATUS_TRY(check_ptr(fn, "dw", dw, d_in * d_out));
  if (n == 0 || d_in == 0) return ok_status();  // dx is empty, dw gains nothing
  if (d_out == 0) {
    if (dx) CUDA_CHECK(cudaMemsetAsync(dx, 0, sizeof(float) * n * d_in, stream));
    return ok_status();
  }
  cublasHandle_t h;
  STATUS_TRY(kernels::cuda::detail::cublas_handle(stream, &h));
  if (dx)
    STATUS_TRY(kernels::cuda::detail::rm_sgemm(h, false, true, int(n), int(d_in), int(d_out), 1.0f,
                                               dy, int(d_out), w, int(d_out), 0.0f, dx, int(d_in)));
  return kernels::cuda::detail::rm_sgemm(h, true, false, int(d_in), int(d_out), int(n), 1.0f, x,
                                         int(d_in), dy, int(d_out), 1.0f, dw, int(d_out));
}

status rmsnorm_forward(cudaStream_t stream, const float* x, const float* g, int64_t n, int64_t d,
                       float* y, float* inv_rms) {
  const char* fn = "rmsnorm_forward";
  STATUS_TRY(check_size(fn, "n", n, INT64_MAX / 2));
  STATUS_TRY(check_size(fn, "d", d, INT64_MAX / 2));
  STATUS_TRY(check_ptr(fn, "x", x, n * d));
  STATUS_TRY(check_ptr(fn, "g", g, d));
  STATUS_TRY(check_ptr(fn, "y", y, n * d));
  STATUS_TRY(check_ptr(fn, "inv_rms", inv_rms, n));
  if (n == 0) return ok_status();
  rmsnorm_forward_kernel<<<blocks_for(n, 128), 128, 0, stream>>>(x, g, n, d, y, inv_rms);
  CUDA_CHECK_LAUNCH();
  return ok_status();
}

status rmsnorm_backward(cudaStream_t stream, const float* x, const float* g, const float* inv_rms,
                        const float* dy, int64_t n, int64_t d, float* dx, float* dg) {
  const char* fn = "rmsnorm_backward";
  STATUS_TRY(check_size(fn, "n", n, INT64_MAX / 2));
  STATUS_TRY(check_size(fn, "d", d, INT64_MAX / 2));
  STATUS_TRY(check_ptr(fn, "x", x, n * d));
  STATUS_TRY(check_ptr(fn, "g", g, d));
  STATUS_TRY(check_ptr(fn, "inv_rms", inv_rms, n));
  STATUS_TRY(check_ptr(fn, "dy", dy, n * d));
  STATUS_TRY(check_ptr(fn, "dx", dx, n * d));
  STATUS_TRY(check_ptr(fn, "dg", dg, d));
  if (n == 0 || d == 0) return ok_status();
  rmsnorm_backward_rows<<<blocks_for(n, 128), 128, 0, stream>>>(x, g, inv_rms, dy, n, d, dx);
  CUDA_CHECK_LAUNCH();
  rmsnorm_backward_cols<<<blocks_for(d, 128), 128, 0, stream>>>(x, inv_rms, dy, n, d, dg);
  CUDA_CHECK_LAUNCH();
  return ok_status();
}

status log_softmax_row(cudaStream_t stream, const float* logits, int n, float temperature,
                       float* out) {
  const char* fn = "log_softmax_row";
  STATUS_TRY(check_size(fn, "n", n));
  if (!(temperature > 0))
    return detail::bad_argument(fn, "temperature " + std::to_string(temperature) + " is not > 0");
  STATUS_TRY(check_ptr(fn, "logits", logits, n));
  STATUS_TRY(check_ptr(fn, "out", out, n));
  if (n == 0) return ok_status();
  log_softmax_row_kernel<<<1, kSoftmaxThreads, 0, stream>>>(logits, n, temperature, out);
  CUDA_CHECK_LAUNCH();
  return ok_status();
}

}  // namespace moerl::policy::cuda
