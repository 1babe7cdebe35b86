#include "fabric/internal/ep_payload.h"

#include <algorithm>

#include "common/status_try.h"
#include "kernels/combine.h"

#if MOERL_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels_cuda.h"
#endif
#include "fabric/device_memory.h"

namespace moerl::fabric::detail {

result<std::unique_ptr<ep_payload>> ep_payload::create(ep_memory memory,
                                                       kernels::thread_pool& pool) {
  std::unique_ptr<ep_payload> p(new ep_payload(memory, pool));
  if (memory != ep_memory::cuda) return p;
  // device_count() names a build without CUDA or a process without a device.
  if (auto n = device_count(); !n) return n.err();
#if MOERL_HAVE_CUDA
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  p->stream_ = s;
#endif
  return p;
}

ep_payload::~ep_payload() {
  for (void* p : private_device_) device_free(p);
#if MOERL_HAVE_CUDA
  device_free(device_tables_);
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
#endif
}

result<char*> ep_payload::private_rows(int which, int64_t bytes) {
  bytes = std::max<int64_t>(bytes, 1);
  if (memory_ != ep_memory::cuda) {
    std::vector<char>& v = private_host_[which];
    if (static_cast<int64_t>(v.size()) < bytes) v.resize(static_cast<size_t>(bytes));
    return v.data();
  }
  if (private_device_bytes_[which] < bytes) {
    device_free(private_device_[which]);
    private_device_[which] = nullptr;
    private_device_bytes_[which] = 0;
    auto a = device_allocate(static_cast<size_t>(bytes));
    if (!a) return a.err();
    private_device_[which] = a->ptr;
    private_device_bytes_[which] = bytes;
  }
  return static_cast<char*>(private_device_[which]);
}

status ep_payload::run() {
  if (plan_.empty()) return {};
  status st = memory_ == ep_memory::cuda
                  ? run_on_device()
                  : kernels::copy_rows(pool_, plan_.data(), static_cast<int64_t>(plan_.size()));
  plan_.clear();
  return st;
}

namespace {

template <class T>
status reduce_term_rows(kernels::thread_pool& pool, const char* const* term_rows,
                        const float* weight, int64_t num_tokens, int width, int64_t hidden,
                        void* y) {
  std::vector<const T*> rows(static_cast<size_t>(num_tokens * width));
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = reinterpret_cast<const T*>(term_rows[i]);
  return kernels::combine_rows_forward(pool, rows.data(), weight, num_tokens, width, hidden,
                                       static_cast<T*>(y));
}

}  // namespace

status ep_payload::combine_rows(ep_dtype dtype, const char* const* term_rows, const float* weight,
                                int64_t num_tokens, int width, int64_t hidden, void* y) {
  if (memory_ == ep_memory::cuda)
    return combine_rows_on_device(dtype, term_rows, weight, num_tokens, width, hidden, y);
  return dtype == ep_dtype::bf16
             ? reduce_term_rows<kernels::bf16>(pool_, term_rows, weight, num_tokens, width, hidden,
                                               y)
             : reduce_term_rows<float>(pool_, term_rows, weight, num_tokens, width, hidden, y);
}

status ep_payload::combine(ep_dtype dtype, const char* rows, const int64_t* slot,
                           const float* weight, int64_t num_tokens, int topk, int64_t hidden,
                           int64_t num_rows, void* y) {
  if (memory_ == ep_memory::cuda)
    return combine_on_device(dtype, rows, slot, weight, num_tokens, topk, hidden, num_rows, y);
  return dtype == ep_dtype::bf16
             ? kernels::combine_forward(pool_, reinterpret_cast<const kernels::bf16*>(rows), slot,
                                        weight, num_tokens, topk, hidden, num_rows,
                                        static_cast<kernels::bf16*>(y))
             : kernels::combine_forward(pool_, reinterpret_cast<const float*>(rows), slot, weight,
                                        num_tokens, topk, hidden, num_rows, static_cast<float*>(y));
}

#if MOERL_HAVE_CUDA

status ep_payload::run_on_device() {
  auto s = static_cast<cudaStream_t>(stream_);
  if (auto st = kernels::cuda::copy_rows(s, plan_.data(), static_cast<int64_t>(plan_.size())); !st)
    return st;
  CUDA_CHECK(cudaStreamSynchronize(s));
  return {};
}

result<char*> ep_payload::device_tables(int64_t bytes) {
  if (bytes > device_tables_bytes_) {
    device_free(device_tables_);
    device_tables_ = nullptr;
    device_tables_bytes_ = 0;
    ASSIGN_OR_RETURN(auto a, device_allocate(static_cast<size_t>(bytes)));
    device_tables_ = a.ptr;
    device_tables_bytes_ = bytes;
  }
  return static_cast<char*>(device_tables_);
}

status ep_payload::combine_rows_on_device(ep_dtype dtype, const char* const* term_rows,
                                          const float* weight, int64_t num_tokens, int width,
                                          int64_t hidden, void* y) {
  auto s = static_cast<cudaStream_t>(stream_);
  // The row pointers [T, W] (device addresses: ours, or peers' through CUDA IPC), then the
  // weights [T, W], in one device allocation.
  const int64_t entries = num_tokens * width;
  ASSIGN_OR_RETURN(char* tables,
                   device_tables(entries * static_cast<int64_t>(sizeof(void*) + sizeof(float))));
  auto* d_weight = reinterpret_cast<float*>(tables + entries * sizeof(void*));
  CUDA_CHECK(
      cudaMemcpyAsync(tables, term_rows, entries * sizeof(void*), cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaMemcpyAsync(d_weight, weight, entries * sizeof(float), cudaMemcpyHostToDevice, s));
  const status st = dtype == ep_dtype::bf16
                        ? kernels::cuda::combine_rows_forward(
                              s, reinterpret_cast<const kernels::bf16* const*>(tables), d_weight,
                              num_tokens, width, hidden, static_cast<kernels::bf16*>(y))
                        : kernels::cuda::combine_rows_forward(
                              s, reinterpret_cast<const float* const*>(tables), d_weight,
                              num_tokens, width, hidden, static_cast<float*>(y));
  if (!st) return st;
  CUDA_CHECK(cudaStreamSynchronize(s));
  return {};
}

status ep_payload::combine_on_device(ep_dtype dtype, const char* rows, const int64_t* slot,
                                     const float* weight, int64_t num_tokens, int topk,
                                     int64_t hidden, int64_t num_rows, void* y) {
  auto s = static_cast<cudaStream_t>(stream_);
  // slot [T, K] int64, then weight [T, K] fp32, in one device allocation kept between steps.
  const int64_t entries = num_tokens * topk;
  ASSIGN_OR_RETURN(char* tables,
                   device_tables(entries * static_cast<int64_t>(sizeof(int64_t) + sizeof(float))));
  auto* d_slot = reinterpret_cast<int64_t*>(tables);
  auto* d_weight = reinterpret_cast<float*>(d_slot + entries);
  CUDA_CHECK(cudaMemcpyAsync(d_slot, slot, entries * sizeof(int64_t), cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaMemcpyAsync(d_weight, weight, entries * sizeof(float), cudaMemcpyHostToDevice, s));
  const status st = dtype == ep_dtype::bf16
                        ? kernels::cuda::combine_forward(
                              s, reinterpret_cast<const kernels::bf16*>(rows), d_slot, d_weight,
                              num_tokens, topk, hidden, num_rows, static_cast<kernels::bf16*>(y))
                        : kernels::cuda::combine_forward(s, reinterpret_cast<const float*>(rows),
                                                         d_slot, d_weight, num_tokens, topk, hidden,
                                                         num_rows, static_cast<float*>(y));
  if (!st) return st;
  CUDA_CHECK(cudaStreamSynchronize(s));
  return {};
}

#else  // create() refused ep_memory::cuda: these are never reached.

status ep_payload::run_on_device() { return device_count().err(); }
status ep_payload::combine_on_device(ep_dtype, const char*, const int64_t*, const float*, int64_t,
                                     int, int64_t, int64_t, void*) {
  return device_count().err();
}
status ep_payload::combine_rows_on_device(ep_dtype, const char* const*, const float*, int64_t, int,
                                          int64_t, void*) {
  return device_count().err();
}
result<char*> ep_payload::device_tables(int64_t) { return device_count().err(); }

#endif

}  // namespace moerl::fabric::detail
