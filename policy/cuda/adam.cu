// CUDA twin of policy/adam.cpp: the squared gradient norm as a two-pass fixed-order reduction
// in double, read back once per step; the update is adam_update_one (shared with the CPU) per
// parameter.
#include <cmath>
#include <vector>

#include "common/status_try.h"
#include "policy/cuda/adam_cuda.h"
#include "policy/cuda/device_common.cuh"
#include "policy/internal/adam_update.h"

namespace moerl::policy::cuda {

namespace {

constexpr int kThreads = 256;
// Blocks of the first pass: a fixed count for a given n, so the summation tree (and the
// result's bits) depend on the size only.
constexpr int kMaxBlocks = 1024;

struct sum_op {
  __device__ double operator()(double a, double b) const { return a + b; }
};

__global__ void sumsq_partial(const float* g, int64_t n, double* partial) {
  __shared__ double s[kThreads];
  double acc = 0;
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * kThreads)
    acc += double(g[i]) * g[i];
  acc = detail::block_reduce<kThreads>(acc, s, sum_op());
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void sumsq_final(const double* partial, int num_partials, double* total) {
  __shared__ double s[kThreads];
  double acc = 0;
  for (int i = threadIdx.x; i < num_partials; i += kThreads) acc += partial[i];
  acc = detail::block_reduce<kThreads>(acc, s, sum_op());
  if (threadIdx.x == 0) *total = acc;
}

__global__ void update_kernel(policy::detail::adam_step_coeffs c, const float* g, int64_t n,
                              float* m, float* v, float* p) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    policy::detail::adam_update_one(c, g[i], m[i], v[i], p[i]);
}

}  // namespace

result<std::unique_ptr<adam>> adam::create(const adam_config& cfg, size_t num_params) {
  std::unique_ptr<adam> a(new adam(cfg, num_params));
  const size_t bytes = sizeof(float) * num_params;
  CUDA_CHECK(cudaMalloc(&a->sumsq_, sizeof(double) * (kMaxBlocks + 1)));
  if (num_params > 0) {
    CUDA_CHECK(cudaMalloc(&a->m_, bytes));
    CUDA_CHECK(cudaMalloc(&a->v_, bytes));
    CUDA_CHECK(cudaMemset(a->m_, 0, bytes));
    CUDA_CHECK(cudaMemset(a->v_, 0, bytes));
  }
  return result<std::unique_ptr<adam>>(std::move(a));
}

adam::~adam() {
  // Frees after the device is idle with respect to these buffers (cudaFree synchronises).
  if (m_) cudaFree(m_);
  if (v_) cudaFree(v_);
  if (sumsq_) cudaFree(sumsq_);
}

result<double> adam::squared_norm(cudaStream_t stream, const float* x, size_t count) {
  const int64_t n = static_cast<int64_t>(count);
  STATUS_TRY(detail::check_ptr("adam::squared_norm", "x", x, n));
  double sq = 0;
  if (n > 0) {
    const unsigned blocks = kernels::cuda::detail::blocks_for(n, kThreads, kMaxBlocks);
    sumsq_partial<<<blocks, kThreads, 0, stream>>>(x, n, sumsq_);
    CUDA_CHECK_LAUNCH();
    sumsq_final<<<1, kThreads, 0, stream>>>(sumsq_, int(blocks), sumsq_ + kMaxBlocks);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(
        cudaMemcpyAsync(&sq, sumsq_ + kMaxBlocks, sizeof sq, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  return sq;
}

result<double> adam::step(cudaStream_t stream, float* params, const float* grads) {
  STATUS_TRY(detail::check_ptr("adam::step", "params", params, int64_t(n_)));
  STATUS_TRY(detail::check_ptr("adam::step", "grads", grads, int64_t(n_)));
  ASSIGN_OR_RETURN(double sq, squared_norm(stream, grads, n_));
  const double norm = std::sqrt(sq);
  STATUS_TRY(step_with_norm(stream, params, grads, norm));
  return norm;
}

status adam::step_with_norm(cudaStream_t stream, float* params, const float* grads, double norm) {
  const int64_t n = static_cast<int64_t>(n_);
  STATUS_TRY(detail::check_ptr("adam::step", "params", params, n));
  STATUS_TRY(detail::check_ptr("adam::step", "grads", grads, n));
  if (!std::isfinite(norm))
    return error{errc::invalid_argument, "adam: gradient is not finite; step skipped"};
  ++t_;
  const policy::detail::adam_step_coeffs c =
      policy::detail::adam_coeffs(cfg_, t_, policy::detail::adam_clip_scale(cfg_, norm));
  if (n > 0) {
    update_kernel<<<kernels::cuda::detail::blocks_for(n, kThreads), kThreads, 0, stream>>>(
        c, grads, n, m_, v_, params);
    CUDA_CHECK_LAUNCH();
  }
  return ok_status();
}

result<std::string> adam::serialize(cudaStream_t stream) const {
  std::vector<float> m(n_), v(n_);
  if (n_ > 0) {
    CUDA_CHECK(cudaMemcpyAsync(m.data(), m_, sizeof(float) * n_, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaMemcpyAsync(v.data(), v_, sizeof(float) * n_, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  return write_adam_state(uint64_t(t_), m, v);
}

status adam::load(cudaStream_t stream, const std::string& bytes) {
  ASSIGN_OR_RETURN(adam_state state, read_adam_state(bytes));
  if (auto st = policy::detail::check_adam_state_size(state, n_); !st) return st;
  if (n_ > 0) {
    CUDA_CHECK(
        cudaMemcpyAsync(m_, state.m.data(), sizeof(float) * n_, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(
        cudaMemcpyAsync(v_, state.v.data(), sizeof(float) * n_, cudaMemcpyHostToDevice, stream));
    // The host vectors die at return: the copies must be done by then.
    CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  t_ = static_cast<int64_t>(state.steps);
  return ok_status();
}

}  // namespace moerl::policy::cuda
