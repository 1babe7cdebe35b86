// Private to kernels/cuda: one checking macro per C API (CUDA runtime, cuBLAS). A failed call
// returns errc::cuda_error from the enclosing function, naming the call, its error string,
// the file and the line.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "common/error.h"
#include "common/status_try.h"

#define CUDA_CHECK(call)                                                                           \
  do {                                                                                             \
    const cudaError_t err_ = (call);                                                               \
    if (err_ != cudaSuccess)                                                                       \
      return ::moerl::error(::moerl::errc::cuda_error,                                             \
                            std::string(#call) + " failed: " + cudaGetErrorString(err_) + " at " + \
                                __FILE__ + ":" + std::to_string(__LINE__));                        \
  } while (0)

#define CUBLAS_CHECK(call)                                                                  \
  do {                                                                                      \
    const cublasStatus_t st_ = (call);                                                      \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                       \
      return ::moerl::error(::moerl::errc::cuda_error,                                      \
                            std::string(#call) + " failed: " + cublasGetStatusString(st_) + \
                                " at " + __FILE__ + ":" + std::to_string(__LINE__));        \
  } while (0)

// After a kernel launch: launch-configuration errors surface here, not at the next call.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
