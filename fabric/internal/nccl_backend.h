// NCCL communicator for collective_group's GPU buffers. Private to fabric/. Compiled with
// real NCCL calls when MOERL_HAVE_NCCL; otherwise available() is false and create fails.
#pragma once

#if !defined(MOERL_INSIDE_moerl_fabric)
#error \
    "fabric/internal/nccl_backend.h is private to moerl_fabric (fabric/): include its public headers"
#endif

#include <cstddef>
#include <memory>
#include <vector>

#include "common/error.h"
#include "fabric/bootstrap.h"

namespace moerl::fabric {

class nccl_backend {
 public:
  static bool available();
  // Rank 0 creates the NCCL unique id; the bootstrap carries it to the others. Uses the
  // current CUDA device and a stream of its own.
  static result<std::unique_ptr<nccl_backend>> create(bootstrap& boot,
                                                      const std::vector<int>& members, int rank,
                                                      int64_t timeout_ms);
  virtual ~nccl_backend() = default;
  // Synchronous: return after the stream finished. `data` is device memory.
  virtual status all_reduce_sum(void* data, size_t count, bool bf16) = 0;
  virtual status broadcast(void* data, size_t bytes, int root) = 0;
};

}  // namespace moerl::fabric
