// job/rank_threads: while a task runs on more than one rank thread, every rank's BLAS calls
// run on its own thread (a multithreaded OpenBLAS queues concurrent calls on a process-wide
// lock and spins meanwhile: fabric/PERF.md, "EP trainer step"); the process's BLAS thread
// count comes back after the task, and a one-rank group leaves it alone.
#include <gtest/gtest.h>

#include <cblas.h>

#include <atomic>
#include <vector>

#include "job/rank_threads.h"

namespace moerl::job {
namespace {

// BLAS's thread count as each rank's task saw it.
std::vector<int> blas_threads_seen_by_ranks(int num_ranks) {
  auto group = rank_threads::start(
      num_ranks, [](fabric::bootstrap&) { return ok_status(); }, [](int) {});
  EXPECT_TRUE(group.ok()) << (group.ok() ? "" : group.err().to_string());
  if (!group.ok()) return {};
  std::vector<std::atomic<int>> seen(num_ranks);
  auto st = (*group)->run([&](int rank) {
    seen[rank] = openblas_get_num_threads();
    return ok_status();
  });
  EXPECT_TRUE(st.ok()) << (st.ok() ? "" : st.err().to_string());
  std::vector<int> out;
  for (auto& s : seen) out.push_back(s.load());
  return out;
}

TEST(rank_threads, ranks_run_blas_on_their_own_thread_and_the_count_comes_back) {
  const int before = openblas_get_num_threads();
  openblas_set_num_threads(2);
  EXPECT_EQ(blas_threads_seen_by_ranks(2), std::vector<int>({1, 1}));
  EXPECT_EQ(openblas_get_num_threads(), 2);
  EXPECT_EQ(blas_threads_seen_by_ranks(1), std::vector<int>({2}));
  EXPECT_EQ(openblas_get_num_threads(), 2);
  openblas_set_num_threads(before);
}

}  // namespace
}  // namespace moerl::job
