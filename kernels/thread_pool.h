// The CPU execution context every kernels/ CPU primitive takes explicitly (the CPU twin of
// a cudaStream_t): a fixed set of worker threads that split a loop into contiguous chunks.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace moerl::kernels {

class thread_pool {
 public:
  // num_threads <= 0: one thread per hardware thread. The calling thread works too, so a
  // pool of N threads starts N - 1 workers.
  explicit thread_pool(int num_threads = 0);
  ~thread_pool();
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  int num_threads() const;

  // Calls fn(begin, end) on disjoint contiguous chunks covering [0, n) and returns when all
  // chunks are done. Chunks are at least min_chunk long, so tiny loops stay on one thread.
  // The split depends only on n, min_chunk and num_threads(), never on timing; primitives
  // that promise bitwise reproducibility give each output element to exactly one chunk.
  // Safe to call from any thread: concurrent calls are serialised; a call made from inside
  // fn runs inline on the calling thread (no deadlock, no nested parallelism).
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                    int64_t min_chunk = 1);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace moerl::kernels
