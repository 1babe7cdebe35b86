// Private to policy/cuda: host-side argument checks and a block reduction shared by the dense
// twins. The rest (CUDA_CHECK, CUBLAS_CHECK, the thread's cuBLAS handle, rm_sgemm, stream-
// ordered scratch, blocks_for) is kernels/cuda/device_util.cuh's, shared by every twin.
#pragma once

#if !defined(MOERL_INSIDE_moerl_policy_cuda)
#error "policy/cuda/device_common.cuh is private to moerl_policy_cuda (policy/cuda/)"
#endif

#include <climits>
#include <cstdint>
#include <string>

#include "common/error.h"
#include "kernels/cuda/device_util.cuh"

namespace moerl::policy::cuda::detail {

// errc::invalid_argument "cuda::<fn>: <what>".
inline error bad_argument(const char* fn, const std::string& what) {
  return error{errc::invalid_argument, std::string("cuda::") + fn + ": " + what};
}

// A size: >= 0, and <= INT_MAX where it becomes a cuBLAS dimension or a grid size.
inline status check_size(const char* fn, const char* name, int64_t v, int64_t max = INT_MAX) {
  if (v < 0 || v > max)
    return bad_argument(fn, std::string(name) + " = " + std::to_string(v) + " is outside 0.." +
                                std::to_string(max));
  return ok_status();
}

// A tensor of `numel` elements needs storage unless it is empty.
inline status check_ptr(const char* fn, const char* name, const void* p, int64_t numel) {
  if (numel > 0 && !p)
    return bad_argument(
        fn, std::string(name) + " is null but holds " + std::to_string(numel) + " elements");
  return ok_status();
}

// The reduction of one value per thread of a block of kThreads (a power of two) threads, in a
// fixed tree order (the same result run to run); every thread gets the result. `shared`
// holds kThreads values.
template <int kThreads, class T, class Op>
__device__ T block_reduce(T v, T* shared, Op op) {
  static_assert((kThreads & (kThreads - 1)) == 0, "kThreads must be a power of two");
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half)
      shared[threadIdx.x] = op(shared[threadIdx.x], shared[threadIdx.x + half]);
    __syncthreads();
  }
  const T r = shared[0];
  __syncthreads();  // shared may be reused by the caller's next reduction
  return r;
}

}  // namespace moerl::policy::cuda::detail
