// The grouped FFN splits every expert's GEMMs over the pool's threads (kernels/cpu/
// expert_ffn.cpp): the split must not change results, must cover odd sizes whose parts can
// be empty, and must leave the process's BLAS thread count as it found it.
#include <gtest/gtest.h>

#include <cblas.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/expert_ffn.h"
#include "test_util.h"

using namespace moerl::kernels;
using namespace moerl::kernels::testing;

namespace {

struct ffn_result {
  std::vector<float> h, a, y, gx, gwgu, gwd;
};

// Forward and backward on one pool; weight-gradient buffers start as NaN so a part that
// forgot its share (an empty expert's zeros included) shows up.
ffn_result run(int threads, const std::vector<int64_t>& offset, int64_t H, int64_t F) {
  const int E = static_cast<int>(offset.size()) - 1;
  const int64_t rows = offset.back();
  thread_pool pool(threads);
  auto x = random_floats(rows * H, 31);
  auto wgu = random_floats(E * 2 * F * H, 32, -0.1f, 0.1f);
  auto wd = random_floats(E * H * F, 33, -0.1f, 0.1f);
  auto gy = random_floats(rows * H, 34);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  ffn_result r{std::vector<float>(rows * 2 * F),    std::vector<float>(rows * F),
               std::vector<float>(rows * H),        std::vector<float>(rows * H, nan),
               std::vector<float>(wgu.size(), nan), std::vector<float>(wd.size(), nan)};
  EXPECT_TRUE(expert_ffn_forward(pool, {E, H, F}, offset.data(), x.data(), wgu.data(), wd.data(),
                                 r.h.data(), r.a.data(), r.y.data())
                  .ok());
  EXPECT_TRUE(expert_ffn_backward(pool, {E, H, F}, offset.data(), x.data(), wgu.data(), wd.data(),
                                  r.h.data(), r.a.data(), gy.data(), r.gx.data(), r.gwgu.data(),
                                  r.gwd.data())
                  .ok());
  return r;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5 + 1e-5 * std::fabs(want[i])) << what << " element " << i;
}

}  // namespace

TEST(expert_ffn_split, any_pool_size_gives_the_single_thread_results) {
  // H and 2F are not multiples of 16, and small enough that some of 5 parts are empty;
  // expert 2 has no rows, expert 3 a single row.
  const std::vector<int64_t> offset = {0, 7, 40, 40, 41};
  const int64_t H = 70, F = 21;
  const ffn_result one = run(1, offset, H, F);
  for (int threads : {2, 3, 5}) {
    SCOPED_TRACE(threads);
    const ffn_result many = run(threads, offset, H, F);
    expect_close(many.h, one.h, "gate_up");
    expect_close(many.a, one.a, "act");
    expect_close(many.y, one.y, "out");
    expect_close(many.gx, one.gx, "grad_x");
    expect_close(many.gwgu, one.gwgu, "grad_w_gate_up");
    expect_close(many.gwd, one.gwd, "grad_w_down");
  }
  // The empty expert's weight gradients are zeros, not left over.
  for (int64_t i = 2 * 2 * F * H; i < 3 * 2 * F * H; ++i) ASSERT_EQ(one.gwgu[i], 0.0f);
}

TEST(expert_ffn_split, the_blas_thread_count_is_restored_after_each_call) {
  const int before = openblas_get_num_threads();
  openblas_set_num_threads(2);
  run(3, {0, 5, 9}, 33, 17);
  EXPECT_EQ(openblas_get_num_threads(), 2);
  openblas_set_num_threads(before);
}
