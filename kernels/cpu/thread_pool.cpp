#include "kernels/thread_pool.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace moerl::kernels {

namespace {
// Set while a thread runs a chunk, so a nested parallel_for runs inline instead of waiting
// for workers that are busy running the outer loop.
thread_local bool t_inside_pool = false;
}  // namespace

struct thread_pool::impl {
  int num_threads = 1;
  std::vector<std::thread> workers;

  std::mutex call_mutex;  // serialises parallel_for calls

  std::mutex m;
  std::condition_variable work_cv;
  std::condition_variable done_cv;
  uint64_t generation = 0;  // bumped per call; workers wait for a new one
  bool stopping = false;
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t n = 0;
  int64_t num_chunks = 0;
  int pending = 0;  // workers that have not finished the current call

  // Chunk c of num_chunks over [0, n): contiguous and balanced, a pure function of its
  // arguments so the split never depends on timing.
  static void chunk_bounds(int64_t n, int64_t num_chunks, int64_t c, int64_t* b, int64_t* e) {
    const int64_t base = n / num_chunks, rem = n % num_chunks;
    *b = c * base + std::min(c, rem);
    *e = *b + base + (c < rem ? 1 : 0);
  }

  void run_chunk(int64_t c) {
    if (c >= num_chunks) return;
    int64_t b, e;
    chunk_bounds(n, num_chunks, c, &b, &e);
    if (b < e) (*fn)(b, e);
  }

  void worker_loop(int index) {
    t_inside_pool = true;
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(m);
        work_cv.wait(lock, [&] { return stopping || generation != seen; });
        if (stopping) return;
        seen = generation;
      }
      run_chunk(index + 1);  // chunk 0 belongs to the calling thread
      {
        std::lock_guard<std::mutex> lock(m);
        if (--pending == 0) done_cv.notify_one();
      }
    }
  }
};

thread_pool::thread_pool(int num_threads) : impl_(std::make_unique<impl>()) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::thread::hardware_concurrency());
  impl_->num_threads = std::max(1, num_threads);
  for (int i = 0; i + 1 < impl_->num_threads; ++i)
    impl_->workers.emplace_back([this, i] { impl_->worker_loop(i); });
}

thread_pool::~thread_pool() {
  {
    std::lock_guard<std::mutex> lock(impl_->m);
    impl_->stopping = true;
  }
  impl_->work_cv.notify_all();
  for (auto& w : impl_->workers) w.join();
}

int thread_pool::num_threads() const { return impl_->num_threads; }

void thread_pool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                               int64_t min_chunk) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  const int64_t want = std::min<int64_t>(impl_->num_threads, (n + min_chunk - 1) / min_chunk);
  if (want <= 1 || t_inside_pool) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> call(impl_->call_mutex);
  {
    std::lock_guard<std::mutex> lock(impl_->m);
    impl_->fn = &fn;
    impl_->n = n;
    impl_->num_chunks = want;
    impl_->pending = static_cast<int>(impl_->workers.size());
    ++impl_->generation;
  }
  impl_->work_cv.notify_all();
  t_inside_pool = true;
  impl_->run_chunk(0);
  t_inside_pool = false;
  std::unique_lock<std::mutex> lock(impl_->m);
  impl_->done_cv.wait(lock, [&] { return impl_->pending == 0; });
}

}  // namespace moerl::kernels
