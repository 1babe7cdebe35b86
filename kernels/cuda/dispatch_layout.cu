// CUDA twin of kernels/cpu/dispatch_layout.cpp. The slot maps must follow token order inside
// each expert and rank, as on the CPU, so they are built by an ordered bucket assignment:
// per-chunk bucket counts, a per-bucket scan over chunks, then each chunk walks its entries
// in order. Integer-only, so the result is identical to the CPU's.
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/internal/validate.h"

namespace moerl::kernels::cuda {

namespace {

constexpr int chunk = 1024;  // entries per chunk of the ordered assignment

// Bucket of entry i: the expert of a routing entry, or the rank of a (token, rank) pair.
struct expert_key {
  const int64_t* idx;
  int E;
  __device__ int operator()(int64_t i) const {
    const int64_t e = idx[i];
    return e >= 0 && e < E ? static_cast<int>(e) : -1;
  }
};
struct rank_key {
  const uint8_t* in_rank;
  int R;
  __device__ int operator()(int64_t i) const { return in_rank[i] ? static_cast<int>(i % R) : -1; }
};

template <class Key>
__global__ void chunk_count_kernel(Key key, int64_t n, int B, int* chunk_counts) {
  extern __shared__ int local[];
  for (int b = threadIdx.x; b < B; b += blockDim.x) local[b] = 0;
  __syncthreads();
  const int64_t base = int64_t(blockIdx.x) * chunk;
  for (int j = threadIdx.x; j < chunk && base + j < n; j += blockDim.x) {
    const int b = key(base + j);
    if (b >= 0) atomicAdd(&local[b], 1);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < B; b += blockDim.x)
    chunk_counts[int64_t(blockIdx.x) * B + b] = local[b];
}

// Per bucket: exclusive scan of its chunk counts (in place) and its total.
__global__ void chunk_scan_kernel(int* chunk_counts, int64_t num_chunks, int B, int64_t* totals) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= B) return;
  int64_t run = 0;
  for (int64_t c = 0; c < num_chunks; ++c) {
    const int v = chunk_counts[c * B + b];
    chunk_counts[c * B + b] = static_cast<int>(run);
    run += v;
  }
  totals[b] = run;
}

// One thread per chunk walks its entries in order with per-bucket cursors in shared memory.
template <class Key>
__global__ void chunk_assign_kernel(Key key, int64_t n, int B, const int* chunk_counts,
                                    const int64_t* bucket_base, int64_t* slot) {
  extern __shared__ int64_t cursor[];
  for (int b = threadIdx.x; b < B; b += blockDim.x)
    cursor[b] = (bucket_base ? bucket_base[b] : 0) + chunk_counts[int64_t(blockIdx.x) * B + b];
  __syncthreads();
  if (threadIdx.x != 0) return;
  const int64_t base = int64_t(blockIdx.x) * chunk;
  for (int j = 0; j < chunk && base + j < n; ++j) {
    const int b = key(base + j);
    slot[base + j] = b >= 0 ? cursor[b]++ : -1;
  }
}

__global__ void in_rank_kernel(const int64_t* idx, int64_t T, int K, int E, int R,
                               uint8_t* in_rank) {
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t >= T) return;
  const int per_rank = E / R;
  for (int r = 0; r < R; ++r) in_rank[t * R + r] = 0;
  for (int k = 0; k < K; ++k) {
    const int64_t e = idx[t * K + k];
    if (e >= 0 && e < E) in_rank[t * R + e / per_rank] = 1;
  }
}

__global__ void offsets_kernel(const int64_t* per_expert, int E, int align, int64_t* offset) {
  offset[0] = 0;
  for (int e = 0; e < E; ++e)
    offset[e + 1] = offset[e] + (per_expert[e] + align - 1) / align * align;
}

// Ordered bucket assignment of n entries into B buckets: totals[b] = entries in bucket b;
// slot (optional) = bucket_base[b] (or 0) + rank of the entry among its bucket's entries.
template <class Key>
status assign(cudaStream_t stream, Key key, int64_t n, int B, int64_t* totals,
              const int64_t* bucket_base, int64_t* slot) {
  const int64_t num_chunks = (n + chunk - 1) / chunk;
  if (num_chunks == 0) {
    CUDA_CHECK(cudaMemsetAsync(totals, 0, B * sizeof(int64_t), stream));
    return ok_status();
  }
  detail::scratch<int> counts(stream, num_chunks * B);
  CUDA_CHECK(counts.error());
  chunk_count_kernel<<<static_cast<unsigned>(num_chunks), 256, B * sizeof(int), stream>>>(
      key, n, B, counts.get());
  CUDA_CHECK_LAUNCH();
  chunk_scan_kernel<<<detail::blocks_for(B, 128), 128, 0, stream>>>(counts.get(), num_chunks, B,
                                                                    totals);
  CUDA_CHECK_LAUNCH();
  if (slot) {
    chunk_assign_kernel<<<static_cast<unsigned>(num_chunks), 128, B * sizeof(int64_t), stream>>>(
        key, n, B, counts.get(), bucket_base, slot);
    CUDA_CHECK_LAUNCH();
  }
  return ok_status();
}

}  // namespace

status get_dispatch_layout(cudaStream_t stream, const int64_t* topk_idx,
                           const dispatch_layout_params& p, const dispatch_layout_out& out) {
  const char* fn = "cuda::get_dispatch_layout";
  // Shapes and pointers only: the table is on the device (kernels_cuda.h).
  if (auto st = kernels::detail::check_dispatch_layout_args(fn, topk_idx, p, out); !st) return st;
  const int64_t T = p.num_tokens;
  const int K = p.topk, E = p.num_experts, R = p.num_ranks;
  if (T > 0) {
    in_rank_kernel<<<detail::blocks_for(T, 128, INT32_MAX), 128, 0, stream>>>(topk_idx, T, K, E, R,
                                                                              out.is_token_in_rank);
    CUDA_CHECK_LAUNCH();
  }
  // Expert counts first (slots need the offsets they produce), then slots.
  STATUS_TRY(assign(stream, expert_key{topk_idx, E}, T * K, E, out.num_tokens_per_expert, nullptr,
                    nullptr));
  if (out.expert_offset) {
    offsets_kernel<<<1, 1, 0, stream>>>(out.num_tokens_per_expert, E, p.expert_alignment,
                                        out.expert_offset);
    CUDA_CHECK_LAUNCH();
  }
  if (out.token_expert_slot) {
    detail::scratch<int64_t> totals(stream, E);
    CUDA_CHECK(totals.error());
    STATUS_TRY(assign(stream, expert_key{topk_idx, E}, T * K, E, totals.get(), out.expert_offset,
                      out.token_expert_slot));
  }
  STATUS_TRY(assign(stream, rank_key{out.is_token_in_rank, R}, T * R, R, out.num_tokens_per_rank,
                    nullptr, out.token_rank_slot));
  return ok_status();
}

}  // namespace moerl::kernels::cuda
