#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels_cuda.h"

namespace moerl::kernels::cuda {

bool device_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

namespace detail {

namespace {
__global__ void scatter_row_entry(const int64_t* slot, int64_t num_entries, int64_t* row_entry) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < num_entries;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t s = slot[i];
    if (s >= 0) row_entry[s] = i;
  }
}
}  // namespace

status build_row_entry(cudaStream_t stream, const int64_t* slot, int64_t num_entries,
                       int64_t num_rows, int64_t* row_entry) {
  if (num_rows > 0)
    CUDA_CHECK(cudaMemsetAsync(row_entry, 0xff, num_rows * sizeof(int64_t), stream));
  if (num_entries > 0) {
    scatter_row_entry<<<blocks_for(num_entries, 256), 256, 0, stream>>>(slot, num_entries,
                                                                        row_entry);
    CUDA_CHECK_LAUNCH();
  }
  return ok_status();
}

status cublas_handle(cudaStream_t stream, cublasHandle_t* out) {
  // One handle per thread (cuBLAS handles are not to be shared across threads), created on
  // first use and kept for the thread's life.
  thread_local cublasHandle_t handle = nullptr;
  if (!handle) CUBLAS_CHECK(cublasCreate(&handle));
  CUBLAS_CHECK(cublasSetStream(handle, stream));
  *out = handle;
  return ok_status();
}

status rm_sgemm(cublasHandle_t h, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  CUBLAS_CHECK(cublasSgemm(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                           trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, ldb, A, lda,
                           &beta, C, ldc));
  return ok_status();
}

}  // namespace detail
}  // namespace moerl::kernels::cuda
