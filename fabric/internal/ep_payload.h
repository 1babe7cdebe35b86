// How the low-latency and normal modes move payload rows (fabric/DEVICE_MEMORY.md): every
// row copy of a phase goes into one plan (kernels/copy_rows.h), run once before the phase's
// immediates, and every reduction runs where the rows are. One object per group, private to
// fabric/.
//
//   ep_memory::host        add() copies at once with memcpy: the interleaved layout's path
//                          as it was, no plan kept.
//   ep_memory::host_split  the plan runs through kernels::copy_rows (the CPU twin of the
//                          device copy) and the reduction through kernels::combine_forward.
//   ep_memory::cuda        the plan runs through kernels::cuda::copy_rows on the group's own
//                          stream, the reduction through kernels::cuda::combine_forward;
//                          both wait for the stream, so the bytes are in place before the
//                          caller's notify() (PROTOCOL.md, "Same host", point 1).
#pragma once

#if !defined(MOERL_INSIDE_moerl_fabric)
#error \
    "fabric/internal/ep_payload.h is private to moerl_fabric (fabric/): include its public headers"
#endif

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "common/error.h"
#include "fabric/ep_group.h"
#include "kernels/copy_rows.h"
#include "kernels/thread_pool.h"

namespace moerl::fabric::detail {

class ep_payload {
 public:
  // cuda: an error naming the build (no CUDA) or the missing device.
  static result<std::unique_ptr<ep_payload>> create(ep_memory memory, kernels::thread_pool& pool);
  ~ep_payload();
  ep_payload(const ep_payload&) = delete;
  ep_payload& operator=(const ep_payload&) = delete;

  ep_memory memory() const { return memory_; }
  bool split() const { return memory_ != ep_memory::host; }
  // Copies bytes from src to dst now (host) or with the next run() (host_split, cuda).
  // Inline: the host layout's every row goes through here, as a plain memcpy.
  void add(void* dst, const void* src, int64_t bytes) {
    if (memory_ == ep_memory::host)
      std::memcpy(dst, src, static_cast<size_t>(bytes));
    else
      plan_.push_back({dst, src, bytes});
  }
  // Runs the copies added since the last run(); they are complete when it returns.
  status run();
  // y [num_tokens, hidden] = kernels::combine_forward over rows [num_rows, hidden] of the
  // payload memory; slot and weight are host arrays [num_tokens, topk].
  status combine(ep_dtype dtype, const char* rows, const int64_t* slot, const float* weight,
                 int64_t num_tokens, int topk, int64_t hidden, int64_t num_rows, void* y);
  // The same with each term a row pointer into payload memory (kernels::combine_rows_forward;
  // nullptr = no term); term_rows and weight are host arrays [num_tokens, width].
  status combine_rows(ep_dtype dtype, const char* const* term_rows, const float* weight,
                      int64_t num_tokens, int width, int64_t hidden, void* y);
  // At least `bytes` of payload memory private to the group (device memory under cuda), kept
  // and grown between calls, one buffer per `which` (0, 1): normal mode's dispatch_buffer()
  // and combine_buffer(), which no peer reads. An error: the device allocation failed.
  result<char*> private_rows(int which, int64_t bytes);

 private:
  ep_payload(ep_memory memory, kernels::thread_pool& pool) : memory_(memory), pool_(pool) {}
  status run_on_device();
  status combine_on_device(ep_dtype dtype, const char* rows, const int64_t* slot,
                           const float* weight, int64_t num_tokens, int topk, int64_t hidden,
                           int64_t num_rows, void* y);
  status combine_rows_on_device(ep_dtype dtype, const char* const* term_rows, const float* weight,
                                int64_t num_tokens, int width, int64_t hidden, void* y);
  // cuda: `bytes` of device memory for the reduction's tables, kept between steps.
  result<char*> device_tables(int64_t bytes);

  ep_memory memory_;
  kernels::thread_pool& pool_;
  std::vector<kernels::row_copy> plan_;
  // private_rows(): host memory, or (cuda) device allocations and their sizes.
  std::vector<char> private_host_[2];
  void* private_device_[2] = {nullptr, nullptr};
  int64_t private_device_bytes_[2] = {0, 0};
  // cuda: the group's stream and the device copies of the reduction's tables.
  void* stream_ = nullptr;
  void* device_tables_ = nullptr;
  int64_t device_tables_bytes_ = 0;
};

}  // namespace moerl::fabric::detail
