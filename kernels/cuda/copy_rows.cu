// The CUDA twin of the batched row copies (kernels/copy_rows.h): one block per copy (the
// grid strides over copies past 65535), its threads moving 16-byte words when the copy's
// pointers and size allow it and single bytes otherwise. Same plan checks as the CPU twin.
#include <cuda_runtime.h>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/internal/validate.h"

namespace moerl::kernels::cuda {

namespace {

__global__ void copy_rows_kernel(const row_copy* copies, int64_t num_copies) {
  for (int64_t i = blockIdx.x; i < num_copies; i += gridDim.x) {
    const row_copy c = copies[i];
    const auto d = reinterpret_cast<uintptr_t>(c.dst), s = reinterpret_cast<uintptr_t>(c.src);
    if (((d | s | static_cast<uintptr_t>(c.bytes)) & 15) == 0) {
      auto* dst = static_cast<uint4*>(c.dst);
      const auto* src = static_cast<const uint4*>(c.src);
      for (int64_t w = threadIdx.x; w < c.bytes / 16; w += blockDim.x) dst[w] = src[w];
    } else {
      auto* dst = static_cast<unsigned char*>(c.dst);
      const auto* src = static_cast<const unsigned char*>(c.src);
      for (int64_t b = threadIdx.x; b < c.bytes; b += blockDim.x) dst[b] = src[b];
    }
  }
}

}  // namespace

status copy_rows(cudaStream_t stream, const row_copy* copies, int64_t num_copies) {
  if (auto st = kernels::detail::check_row_copies("cuda::copy_rows", copies, num_copies); !st)
    return st;
  if (num_copies == 0) return ok_status();
  detail::scratch<row_copy> plan(stream, num_copies);
  CUDA_CHECK(plan.error());
  // From pageable host memory this returns once the plan is staged: the caller may free it.
  CUDA_CHECK(cudaMemcpyAsync(plan.get(), copies, num_copies * sizeof(row_copy),
                             cudaMemcpyHostToDevice, stream));
  const auto blocks = static_cast<unsigned>(num_copies < 65535 ? num_copies : 65535);
  copy_rows_kernel<<<blocks, 256, 0, stream>>>(plan.get(), num_copies);
  CUDA_CHECK_LAUNCH();
  return ok_status();
}

}  // namespace moerl::kernels::cuda
