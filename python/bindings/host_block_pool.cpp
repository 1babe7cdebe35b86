#include "python/bindings/host_block_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace moerl::py {

namespace {

constexpr int64_t huge_page = int64_t{2} << 20;

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

}  // namespace

host_block::host_block(std::shared_ptr<block_owner> owner, void* data, int64_t size, int64_t tag)
    : owner_(std::move(owner)), data_(data), size_(size), tag_(tag) {}

host_block::~host_block() { owner_->release(data_, tag_); }

std::shared_ptr<host_block_pool> host_block_pool::create(int64_t max_cached_bytes) {
  return std::shared_ptr<host_block_pool>(
      new host_block_pool(std::max<int64_t>(max_cached_bytes, 0)));
}

host_block_pool::~host_block_pool() {
  for (const entry& e : free_) munmap(e.data, static_cast<size_t>(e.capacity));
}

result<std::unique_ptr<host_block>> host_block_pool::acquire(int64_t size) {
  if (size <= 0) return error{errc::invalid_argument, "host_block_pool: size must be positive"};
  const int64_t capacity = round_up(size, huge_page);
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Best fit among the cached blocks that are not much larger than asked for.
    const int64_t limit = capacity + capacity / 4 + huge_page;
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->capacity >= capacity && it->capacity <= limit &&
          (best == free_.end() || it->capacity < best->capacity))
        best = it;
    if (best != free_.end()) {
      const entry e = *best;
      free_.erase(best);
      cached_ -= e.capacity;
      return std::make_unique<host_block>(shared_from_this(), e.data, size, e.capacity);
    }
  }
  void* p = mmap(nullptr, static_cast<size_t>(capacity), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return error{errc::io_error,
                 "moerl.ep: mapping " + std::to_string(capacity) +
                     " bytes for a returned tensor failed: " + std::strerror(errno)};
  // Fewer faults on first touch and fewer TLB misses in the row copies; advisory (the kernel
  // may say no, and then 4 KiB pages work the same).
  madvise(p, static_cast<size_t>(capacity), MADV_HUGEPAGE);
  return std::make_unique<host_block>(shared_from_this(), p, size, capacity);
}

void host_block_pool::release(void* data, int64_t capacity) {
  std::vector<entry> drop;
  {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back({data, capacity});
    cached_ += capacity;
    // Over the budget: unmap the oldest first (the newest is the likeliest to fit the next
    // step's request).
    size_t n = 0;
    while (cached_ > max_cached_ && n < free_.size()) {
      cached_ -= free_[n].capacity;
      drop.push_back(free_[n++]);
    }
    free_.erase(free_.begin(), free_.begin() + static_cast<std::ptrdiff_t>(n));
  }
  for (const entry& e : drop) munmap(e.data, static_cast<size_t>(e.capacity));
}

void host_block_pool::raise_cache_limit(int64_t size, int blocks) {
  if (size <= 0 || blocks <= 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  max_cached_ += blocks * round_up(size, huge_page);
}

int64_t host_block_pool::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}

int64_t host_block_pool::cached_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(free_.size());
}

}  // namespace moerl::py
