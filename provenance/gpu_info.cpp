#include "provenance/internal/gpu_info.h"

#ifdef MOERL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#ifdef MOERL_HAVE_NCCL
#include <nccl.h>
#endif

namespace moerl {

gpu_report probe_gpu() {
  gpu_report r{"absent", "absent", "none"};
#ifdef MOERL_HAVE_CUDA
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  const cudaError_t drc = cudaDriverGetVersion(&driver);
  auto fmt = [](int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); };
  r.cuda = {{"runtime", fmt(runtime)},
            {"driver", (drc == cudaSuccess && driver > 0) ? fmt(driver) : "absent"}};
  int count = 0;
  if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) {
    r.gpu = nlohmann::json::array();
    for (int i = 0; i < count; ++i) {
      cudaDeviceProp prop{};
      if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
      r.gpu.push_back(
          {{"name", prop.name},
           {"compute_capability", std::to_string(prop.major) + "." + std::to_string(prop.minor)}});
    }
  } else {
    cudaGetLastError();  // clear the "no device" error so later CUDA calls start clean
  }
#endif
#ifdef MOERL_HAVE_NCCL
  int nccl_version = 0;
  if (ncclGetVersion(&nccl_version) == ncclSuccess) {
    r.nccl = std::to_string(nccl_version / 10000) + "." +
             std::to_string((nccl_version / 100) % 100) + "." + std::to_string(nccl_version % 100);
  }
#endif
  return r;
}

}  // namespace moerl
