// Where an ep_core channel's dropped combine lands (python/bindings/, private): memory of the
// channel's payload kind (device memory for ep_memory cuda channels), grown on demand and
// freed with the channel. Shared by the normal channels (ep_core.cpp) and the low-latency
// ones (ep_core_ll.cpp).
#pragma once

#include <cstdint>
#include <memory>

#include "common/error.h"
#include "fabric/device_memory.h"
#include "fabric/ep_group.h"

namespace moerl::py {

// Where a group of this memory keeps its payload rows, for fabric::memory_copy.
inline fabric::memory_kind payload_kind(fabric::ep_memory m) {
  return m == fabric::ep_memory::cuda ? fabric::memory_kind::cuda : fabric::memory_kind::host;
}

class payload_scratch {
 public:
  payload_scratch() = default;
  payload_scratch(const payload_scratch&) = delete;
  payload_scratch& operator=(const payload_scratch&) = delete;
  ~payload_scratch() { fabric::device_free(device_); }

  // At least `bytes` of memory of `kind`; an error: the device allocation failed.
  result<void*> get(fabric::memory_kind kind, int64_t bytes) {
    if (kind != fabric::memory_kind::cuda) {
      // Uninitialised (new char[]): the low-latency channels' scratch is DeepEP's padded
      // layout, mostly never touched, so its pages should not be faulted in by zeroing.
      if (host_bytes_ < bytes) {
        host_.reset(new char[static_cast<size_t>(bytes)]);
        host_bytes_ = bytes;
      }
      return static_cast<void*>(host_.get());
    }
    if (bytes > device_bytes_) {
      fabric::device_free(device_);
      device_ = nullptr;
      device_bytes_ = 0;
      auto a = fabric::device_allocate(static_cast<size_t>(bytes));
      if (!a) return a.err();
      device_ = a->ptr;
      device_bytes_ = bytes;
    }
    return device_;
  }

 private:
  std::unique_ptr<char[]> host_;
  int64_t host_bytes_ = 0;
  void* device_ = nullptr;
  int64_t device_bytes_ = 0;
};

}  // namespace moerl::py
