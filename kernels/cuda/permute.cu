// CUDA twins of kernels/cpu/permute.cpp: one block per row, threads across the hidden size.
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/internal/validate.h"

namespace moerl::kernels::cuda {

using kernels::detail::check_row_shape;

namespace {

// dst row r = src row (row_entry[r] / divisor), or zeros for a padding row. Rows move as
// vectors of V: 16-byte uint4 when rows and base pointers allow it, else single elements.
template <class V>
__global__ void gather_rows_kernel(const int64_t* row_entry, int64_t divisor, const V* src,
                                   int64_t row_vecs, V* dst) {
  const int64_t r = blockIdx.x;
  const int64_t entry = row_entry[r];
  V* d = dst + r * row_vecs;
  if (entry < 0) {
    for (int64_t j = threadIdx.x; j < row_vecs; j += blockDim.x) d[j] = V{};
    return;
  }
  const V* s = src + (entry / divisor) * row_vecs;
  for (int64_t j = threadIdx.x; j < row_vecs; j += blockDim.x) d[j] = s[j];
}

// Whether rows of row_bytes starting at a and b can be moved as 16-byte vectors.
bool vec16_ok(const void* a, const void* b, int64_t row_bytes) {
  return row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(a) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(b) % 16 == 0;
}

template <class T>
__global__ void permute_backward_kernel(const T* g, const int64_t* slot, int K, int64_t H, T* gx) {
  const int64_t t = blockIdx.x;
  for (int64_t j = threadIdx.x; j < H; j += blockDim.x) {
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) {
      const int64_t s = slot[t * K + k];
      if (s >= 0) acc += detail::to_f32(g[s * H + j]);
    }
    detail::store(gx + t * H + j, acc);
  }
}

template <class V>
__global__ void unpermute_forward_kernel(const V* p, const int64_t* slot, int64_t row_vecs, V* u) {
  const int64_t i = blockIdx.x;
  const int64_t s = slot[i];
  for (int64_t j = threadIdx.x; j < row_vecs; j += blockDim.x)
    u[i * row_vecs + j] = s >= 0 ? p[s * row_vecs + j] : V{};
}

template <class T>
status gather(cudaStream_t stream, const int64_t* slot, int64_t T_, int K, int64_t H, int64_t rows,
              const T* src, int64_t divisor, T* dst) {
  if (rows == 0) return ok_status();
  detail::scratch<int64_t> row_entry(stream, rows);
  CUDA_CHECK(row_entry.error());
  STATUS_TRY(detail::build_row_entry(stream, slot, T_ * K, rows, row_entry.get()));
  const int64_t row_bytes = H * int64_t(sizeof(T));
  if (vec16_ok(src, dst, row_bytes))
    gather_rows_kernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(
        row_entry.get(), divisor, reinterpret_cast<const uint4*>(src), row_bytes / 16,
        reinterpret_cast<uint4*>(dst));
  else
    gather_rows_kernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(row_entry.get(), divisor,
                                                                        src, H, dst);
  CUDA_CHECK_LAUNCH();
  return ok_status();
}

}  // namespace

status permute_forward(cudaStream_t stream, const float* x, const int64_t* slot, int64_t num_tokens,
                       int topk, int64_t hidden, int64_t num_rows, float* permuted) {
  STATUS_TRY(check_row_shape("cuda::permute_forward", num_tokens, topk, hidden, num_rows));
  return gather(stream, slot, num_tokens, topk, hidden, num_rows, x, topk, permuted);
}
status permute_forward(cudaStream_t stream, const bf16* x, const int64_t* slot, int64_t num_tokens,
                       int topk, int64_t hidden, int64_t num_rows, bf16* permuted) {
  STATUS_TRY(check_row_shape("cuda::permute_forward", num_tokens, topk, hidden, num_rows));
  return gather(stream, slot, num_tokens, topk, hidden, num_rows, x, topk, permuted);
}
namespace {

template <class T>
status permute_bwd(cudaStream_t stream, const T* grad_permuted, const int64_t* slot,
                   int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows, T* grad_x) {
  STATUS_TRY(check_row_shape("cuda::permute_backward", num_tokens, topk, hidden, num_rows));
  if (num_tokens == 0) return ok_status();
  permute_backward_kernel<<<static_cast<unsigned>(num_tokens), 256, 0, stream>>>(
      grad_permuted, slot, topk, hidden, grad_x);
  CUDA_CHECK_LAUNCH();
  return ok_status();
}

template <class T>
status unpermute_fwd(cudaStream_t stream, const T* permuted, const int64_t* slot,
                     int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows,
                     T* unpermuted) {
  STATUS_TRY(check_row_shape("cuda::unpermute_forward", num_tokens, topk, hidden, num_rows));
  if (num_tokens == 0) return ok_status();
  const int64_t row_bytes = hidden * int64_t(sizeof(T));
  if (vec16_ok(permuted, unpermuted, row_bytes))
    unpermute_forward_kernel<<<static_cast<unsigned>(num_tokens * topk), 256, 0, stream>>>(
        reinterpret_cast<const uint4*>(permuted), slot, row_bytes / 16,
        reinterpret_cast<uint4*>(unpermuted));
  else
    unpermute_forward_kernel<<<static_cast<unsigned>(num_tokens * topk), 256, 0, stream>>>(
        permuted, slot, hidden, unpermuted);
  CUDA_CHECK_LAUNCH();
  return ok_status();
}

template <class T>
status unpermute_bwd(cudaStream_t stream, const T* grad_unpermuted, const int64_t* slot,
                     int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows,
                     T* grad_permuted) {
  STATUS_TRY(check_row_shape("cuda::unpermute_backward", num_tokens, topk, hidden, num_rows));
  return gather(stream, slot, num_tokens, topk, hidden, num_rows, grad_unpermuted, 1,
                grad_permuted);
}

}  // namespace

status permute_backward(cudaStream_t stream, const float* g, const int64_t* slot,
                        int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows,
                        float* grad_x) {
  return permute_bwd(stream, g, slot, num_tokens, topk, hidden, num_rows, grad_x);
}
status permute_backward(cudaStream_t stream, const bf16* g, const int64_t* slot, int64_t num_tokens,
                        int topk, int64_t hidden, int64_t num_rows, bf16* grad_x) {
  return permute_bwd(stream, g, slot, num_tokens, topk, hidden, num_rows, grad_x);
}
status unpermute_forward(cudaStream_t stream, const float* p, const int64_t* slot,
                         int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows, float* u) {
  return unpermute_fwd(stream, p, slot, num_tokens, topk, hidden, num_rows, u);
}
status unpermute_forward(cudaStream_t stream, const bf16* p, const int64_t* slot,
                         int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows, bf16* u) {
  return unpermute_fwd(stream, p, slot, num_tokens, topk, hidden, num_rows, u);
}
status unpermute_backward(cudaStream_t stream, const float* gu, const int64_t* slot,
                          int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows,
                          float* gp) {
  return unpermute_bwd(stream, gu, slot, num_tokens, topk, hidden, num_rows, gp);
}
status unpermute_backward(cudaStream_t stream, const bf16* gu, const int64_t* slot,
                          int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows,
                          bf16* gp) {
  return unpermute_bwd(stream, gu, slot, num_tokens, topk, hidden, num_rows, gp);
}

}  // namespace moerl::kernels::cuda
