// cuBLAS's entry points that moerl calls (kernels/cuda's GEMMs, policy/cuda's dense ops),
// opening libcublas at the first one (common/on_demand_library.h says why: with libcublasLt
// it is 600 MB and ~400,000 relocations that every process paid at start, though only a
// job on CUDA uses it). A new cuBLAS call shows as an undefined symbol at link time and
// belongs here. Without the library every call returns CUBLAS_STATUS_NOT_INITIALIZED and the
// first failure is logged with dlerror's text.
#include <cublas_v2.h>

#include <string>

#include "common/on_demand_library.h"

namespace {

moerl::on_demand_library& libcublas() {
  static moerl::on_demand_library lib({MOERL_CUBLAS_SONAME, MOERL_CUBLAS_BUILD_PATH},
                                      "GEMMs on CUDA (cuBLAS)");
  return lib;
}

template <class F>
F* entry(const char* name) {
  return moerl::on_demand_symbol<F>(libcublas(), name);
}

}  // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  static auto* f = entry<decltype(cublasCreate_v2)>("cublasCreate_v2");
  return f ? f(handle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  static auto* f = entry<decltype(cublasDestroy_v2)>("cublasDestroy_v2");
  return f ? f(handle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  static auto* f = entry<decltype(cublasSetStream_v2)>("cublasSetStream_v2");
  return f ? f(handle, stream) : CUBLAS_STATUS_NOT_INITIALIZED;
}

const char* cublasGetStatusString(cublasStatus_t status) {
  static auto* f = entry<decltype(cublasGetStatusString)>("cublasGetStatusString");
  if (f) return f(status);
  static const std::string why = "cuBLAS unavailable: " + libcublas().load_error();
  return why.c_str();
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const float* alpha,
                              const float* A, int lda, const float* B, int ldb, const float* beta,
                              float* C, int ldc) {
  static auto* f = entry<decltype(cublasSgemm_v2)>("cublasSgemm_v2");
  return f ? f(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)
           : CUBLAS_STATUS_NOT_INITIALIZED;
}

}  // extern "C"
