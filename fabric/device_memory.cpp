#include "fabric/device_memory.h"

#include <cstring>

#include "common/log.h"
#include "common/status_try.h"

#if MOERL_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_check.h"
#endif

namespace moerl::fabric {

const char* memory_kind_name(memory_kind k) { return k == memory_kind::cuda ? "cuda" : "host"; }

status memory_copy(memory_kind where, void* dst, const void* src, size_t len) {
  if (where == memory_kind::cuda) return device_copy(dst, src, len);
  if (len > 0) std::memcpy(dst, src, len);
  return {};
}

#if MOERL_HAVE_CUDA

static_assert(sizeof(cudaIpcMemHandle_t) == kIpcHandleBytes, "cudaIpcMemHandle_t changed size");

namespace {

// kernels/cuda's one message for a failed CUDA call, where a cleanup must run before returning
// (CUDA_CHECK returns at once).
error cuda_failure(const char* call, cudaError_t rc, int line) {
  return kernels::detail::cuda_call_error(call, cudaGetErrorString(rc), __FILE__, line);
}

}  // namespace

bool cuda_build() { return true; }

result<int> device_count() {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc == cudaErrorNoDevice || (rc == cudaSuccess && n == 0))
    return error{errc::cuda_error,
                 "no CUDA device visible to this process (moerl is built with "
                 "CUDA; device memory needs a GPU)"};
  if (rc != cudaSuccess)
    return error{errc::cuda_error, std::string("no CUDA device visible to this process: "
                                               "cudaGetDeviceCount failed: ") +
                                       cudaGetErrorName(rc) + " (" + cudaGetErrorString(rc) + ")"};
  return n;
}

result<device_allocation> device_allocate(size_t size) {
  if (size == 0) return error{errc::invalid_argument, "device_allocate of 0 bytes"};
  ASSIGN_OR_RETURN(int n, device_count());
  (void)n;
  device_allocation a;
  a.size = size;
  CUDA_CHECK(cudaGetDevice(&a.device));
  if (auto rc = cudaMalloc(&a.ptr, size); rc != cudaSuccess)
    return error{errc::capacity_exceeded, "cudaMalloc of " + std::to_string(size) +
                                              " bytes failed: " + cudaGetErrorString(rc)};
  if (auto rc = cudaMemset(a.ptr, 0, size); rc != cudaSuccess) {
    cudaFree(a.ptr);
    return cuda_failure("cudaMemset", rc, __LINE__);
  }
  cudaIpcMemHandle_t h;
  if (auto rc = cudaIpcGetMemHandle(&h, a.ptr); rc != cudaSuccess) {
    cudaFree(a.ptr);
    return cuda_failure("cudaIpcGetMemHandle", rc, __LINE__);
  }
  static_assert(sizeof h == sizeof a.ipc_handle);
  std::memcpy(a.ipc_handle, &h, sizeof h);
  return a;
}

void device_free(void* ptr) {
  if (!ptr) return;
  if (auto rc = cudaFree(ptr); rc != cudaSuccess)
    logger("fabric")->warn("cudaFree failed: {}", cudaGetErrorString(rc));
}

result<void*> device_ipc_open(const unsigned char (&handle)[kIpcHandleBytes]) {
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle, sizeof h);
  void* p = nullptr;
  CUDA_CHECK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
  return p;
}

void device_ipc_close(void* ptr) {
  if (!ptr) return;
  if (auto rc = cudaIpcCloseMemHandle(ptr); rc != cudaSuccess)
    logger("fabric")->warn("cudaIpcCloseMemHandle failed: {}", cudaGetErrorString(rc));
}

status device_copy(void* dst, const void* src, size_t len) {
  if (len == 0) return {};
  CUDA_CHECK(cudaMemcpy(dst, src, len, cudaMemcpyDefault));
  return {};
}

#else  // no CUDA in this build

namespace {
error no_cuda() {
  return error{errc::cuda_error,
               "this moerl build has no CUDA (MOERL_HAVE_CUDA off: nvcc was not found or "
               "MOERL_ENABLE_CUDA=OFF); device memory needs a CUDA build"};
}
}  // namespace

bool cuda_build() { return false; }
result<int> device_count() { return no_cuda(); }
result<device_allocation> device_allocate(size_t) { return no_cuda(); }
void device_free(void*) {}
result<void*> device_ipc_open(const unsigned char (&)[kIpcHandleBytes]) { return no_cuda(); }
void device_ipc_close(void*) {}
status device_copy(void*, const void*, size_t) { return no_cuda(); }

#endif

}  // namespace moerl::fabric
