// CUDA_CHECK: the one checking macro for CUDA runtime calls, used by kernels/cuda and by
// fabric's NCCL backend (fabric sits above kernels, so it may include this header). A failed
// call returns errc::cuda_error from the enclosing function, naming the call, its error
// string, the file and the line. cuBLAS calls have their own macro in cublas_check.h.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/error.h"
#include "common/status_try.h"

namespace moerl::kernels::detail {
// errc::cuda_error "<call> failed: <what> at <file>:<line>": the one message of the checking
// macros of CUDA's APIs (CUDA_CHECK, CUBLAS_CHECK, fabric's NCCL_CHECK).
inline error cuda_call_error(const char* call, const char* what, const char* file, int line) {
  return error(errc::cuda_error,
               std::string(call) + " failed: " + what + " at " + file + ":" + std::to_string(line));
}
}  // namespace moerl::kernels::detail

// The checking macros' one body: `call` returns a `type` that is `success` or an error code
// that `describe` names. The per-API macros pass the call's spelling as written.
#define MOERL_CUDA_API_CHECK_(call, call_text, type, success, describe)                        \
  do {                                                                                         \
    const type api_rc_ = (call);                                                               \
    if (api_rc_ != (success))                                                                  \
      return ::moerl::kernels::detail::cuda_call_error(call_text, describe(api_rc_), __FILE__, \
                                                       __LINE__);                              \
  } while (0)

#define CUDA_CHECK(call) \
  MOERL_CUDA_API_CHECK_(call, #call, cudaError_t, cudaSuccess, cudaGetErrorString)

// After a kernel launch: launch-configuration errors surface here, not at the next call.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
