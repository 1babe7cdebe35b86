#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "kernels/thread_pool.h"

using moerl::kernels::thread_pool;

TEST(thread_pool, every_index_is_visited_exactly_once_for_any_pool_size) {
  for (int threads : {1, 2, 3, 7}) {
    thread_pool pool(threads);
    for (int64_t n : {0, 1, 5, 1000, 4097}) {
      std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
      pool.parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) seen[i]++;
      });
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(seen[i].load(), 1) << "threads " << threads << " n " << n;
    }
  }
}

TEST(thread_pool, chunks_respect_min_chunk_so_small_loops_stay_on_one_call) {
  thread_pool pool(4);
  std::atomic<int> calls{0};
  pool.parallel_for(
      10,
      [&](int64_t b, int64_t e) {
        EXPECT_EQ(b, 0);
        EXPECT_EQ(e, 10);
        calls++;
      },
      100);
  EXPECT_EQ(calls.load(), 1);
}

TEST(thread_pool, a_nested_call_runs_inline_instead_of_deadlocking) {
  thread_pool pool(3);
  std::atomic<int64_t> total{0};
  pool.parallel_for(6, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      pool.parallel_for(10, [&](int64_t ib, int64_t ie) { total += ie - ib; });
  });
  EXPECT_EQ(total.load(), 60);
}

TEST(thread_pool, concurrent_callers_from_several_threads_are_serialised_correctly) {
  thread_pool pool(2);
  std::vector<std::thread> callers;
  std::atomic<int64_t> total{0};
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&] {
      for (int rep = 0; rep < 50; ++rep)
        pool.parallel_for(100, [&](int64_t b, int64_t e) { total += e - b; });
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 4 * 50 * 100);
}
