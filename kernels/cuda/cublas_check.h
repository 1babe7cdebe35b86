// For the CUDA twins (kernels/cuda, policy/cuda): CUBLAS_CHECK, CUDA_CHECK's twin for cuBLAS
// calls (kept apart so that other users of CUDA_CHECK, fabric's NCCL backend, do not see
// cuBLAS). A failed call returns
// errc::cuda_error naming the call, its status string, the file and the line.
#pragma once

#include <cublas_v2.h>

#include <string>

#include "common/error.h"
#include "kernels/cuda/cuda_check.h"

#define CUBLAS_CHECK(call) \
  MOERL_CUDA_API_CHECK_(call, #call, cublasStatus_t, CUBLAS_STATUS_SUCCESS, cublasGetStatusString)
