// Page-backed host memory that moerl.ep hands to torch as the storage of the CPU tensors it
// returns (python/README.md, "Returned tensors"): normal dispatch's recv_x and combine's
// combined_x. A fresh torch.empty of that size is a fresh mmap in glibc (anything over 32 MiB
// is), so every prefill step paid a page fault and a zero-fill per 4 KiB of its outputs and an
// munmap when the caller dropped them: a third of the CPU time of a 2-rank prefill step. A
// block goes back to its pool when the last tensor viewing it dies, and the next step reuses
// its pages (already faulted in, transparent huge pages where the kernel gives them).
//
// Threading: any thread (a tensor can die on any thread); one mutex.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/error.h"

namespace moerl::py {

// Whoever lends a host_block its memory, told when the block dies: the pool below, or a
// normal channel's output slots (ep_core.cpp).
class block_owner {
 public:
  virtual ~block_owner() = default;
  // `tag`: what the owner gave the block (the pool: its capacity; a channel: its slot).
  virtual void release(void* data, int64_t tag) = 0;
};

// One block: `size` bytes usable at `data` (the memory may be larger). Gives its memory back
// to its owner when destroyed.
class host_block {
 public:
  host_block(std::shared_ptr<block_owner> owner, void* data, int64_t size, int64_t tag);
  host_block(const host_block&) = delete;
  host_block& operator=(const host_block&) = delete;
  ~host_block();
  void* data() const { return data_; }
  int64_t size() const { return size_; }

 private:
  std::shared_ptr<block_owner> owner_;
  void* data_;
  int64_t size_, tag_;
};

class host_block_pool final : public block_owner,
                              public std::enable_shared_from_this<host_block_pool> {
 public:
  // Keeps at most max_cached_bytes of released blocks for reuse (the Buffer's
  // num_nvl_bytes + num_rdma_bytes: the memory its caller budgeted for it).
  static std::shared_ptr<host_block_pool> create(int64_t max_cached_bytes);
  ~host_block_pool() override;
  host_block_pool(const host_block_pool&) = delete;
  host_block_pool& operator=(const host_block_pool&) = delete;

  // A block of `size` bytes (size > 0): a cached one of close capacity (at most a quarter
  // and 2 MiB over, so a small request does not pin a large block), else a new mapping.
  // Contents are unspecified. Fails (errc::io_error, naming the size) only when mmap does.
  result<std::unique_ptr<host_block>> acquire(int64_t size);

  // Lets the pool keep `blocks` more released blocks of `size` bytes beyond its budget (each
  // counted at its mapped capacity): for outputs every step returns whatever the budget, such
  // as the low-latency combine's (ep_core_ll.cpp).
  void raise_cache_limit(int64_t size, int blocks);

  int64_t cached_bytes() const;
  int64_t cached_blocks() const;

 private:
  explicit host_block_pool(int64_t max_cached_bytes) : max_cached_(max_cached_bytes) {}
  void release(void* data, int64_t capacity) override;

  struct entry {
    void* data;
    int64_t capacity;
  };
  mutable std::mutex mu_;
  int64_t max_cached_;
  int64_t cached_ = 0;
  std::vector<entry> free_;  // oldest first
};

}  // namespace moerl::py
