// CUDA_CHECK: the one checking macro for CUDA runtime calls, used by kernels/cuda and by
// fabric's NCCL backend (fabric sits above kernels, so it may include this header). A failed
// call returns errc::cuda_error from the enclosing function, naming the call, its error
// string, the file and the line. cuBLAS calls have their own macro in cublas_check.h.
#pragma once

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

// After a kernel launch: launch-configuration errors surface here, not at the next call.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
