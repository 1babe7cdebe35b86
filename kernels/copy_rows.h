// Batched row copies: one plan of (dst, src, bytes) copies executed as one call. fabric's
// low-latency mode builds such a plan per step on the host (fabric/DEVICE_MEMORY.md) and
// runs it with the CPU twin on host memory and with the CUDA twin (kernels/cuda/
// kernels_cuda.h) on device memory, where thousands of small cudaMemcpy calls would cost a
// launch each.
#pragma once

#include <cstdint>

#include "common/error.h"
#include "kernels/thread_pool.h"

namespace moerl::kernels {

// One copy of a plan: bytes from src to dst. The destinations of one plan do not overlap
// each other or any source (copies run in any order, concurrently on the device).
struct row_copy {
  void* dst = nullptr;
  const void* src = nullptr;
  int64_t bytes = 0;
};

// Runs every copy of copies[0, num_copies). An error (nothing copied) for num_copies < 0, a
// negative byte count, or a null pointer in a copy of more than 0 bytes; names the copy.
status copy_rows(thread_pool& pool, const row_copy* copies, int64_t num_copies);

}  // namespace moerl::kernels
