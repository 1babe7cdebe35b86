#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/expert_ffn.h"
#include "test_util.h"

using namespace moerl::kernels;
using namespace moerl::kernels::testing;

namespace {

// Straightforward double-precision SwiGLU for one row of one expert: the reference the BLAS
// path is held to.
void reference_row(const float* x, const float* wgu, const float* wd, int64_t H, int64_t F,
                   std::vector<double>* y) {
  std::vector<double> a(F);
  for (int64_t j = 0; j < F; ++j) {
    double g = 0, u = 0;
    for (int64_t i = 0; i < H; ++i) {
      g += double(x[i]) * wgu[j * H + i];
      u += double(x[i]) * wgu[(F + j) * H + i];
    }
    a[j] = g / (1 + std::exp(-g)) * u;
  }
  y->assign(H, 0.0);
  for (int64_t i = 0; i < H; ++i)
    for (int64_t j = 0; j < F; ++j) (*y)[i] += a[j] * wd[i * F + j];
}

}  // namespace

TEST(expert_ffn, forward_matches_a_double_reference_with_empty_and_uneven_experts) {
  thread_pool pool(2);
  const int E = 4;
  const int64_t H = 130, F = 48;
  const std::vector<int64_t> offset = {0, 5, 5, 22, 23};  // expert 1 has no rows
  const int64_t rows = offset[E];
  auto x = random_floats(rows * H, 1);
  auto wgu = random_floats(E * 2 * F * H, 2, -0.1f, 0.1f);
  auto wd = random_floats(E * H * F, 3, -0.1f, 0.1f);
  std::vector<float> h(rows * 2 * F), a(rows * F), y(rows * H);
  ASSERT_TRUE(expert_ffn_forward(pool, {E, H, F}, offset.data(), x.data(), wgu.data(), wd.data(),
                                 h.data(), a.data(), y.data())
                  .ok());
  std::vector<double> ref;
  for (int e = 0; e < E; ++e)
    for (int64_t r = offset[e]; r < offset[e + 1]; ++r) {
      reference_row(&x[r * H], &wgu[e * 2 * F * H], &wd[e * H * F], H, F, &ref);
      for (int64_t i = 0; i < H; ++i)
        ASSERT_NEAR(y[r * H + i], ref[i], 1e-5 + 1e-4 * std::fabs(ref[i]));
    }
}

TEST(expert_ffn, backward_matches_finite_differences_for_inputs_and_weights) {
  thread_pool pool(2);
  const int E = 2;
  const int64_t H = 6, F = 4;
  const std::vector<int64_t> offset = {0, 3, 3};  // second expert empty
  const int64_t rows = 3;
  auto x = random_floats(rows * H, 11);
  auto wgu = random_floats(E * 2 * F * H, 12);
  auto wd = random_floats(E * H * F, 13);
  auto gy = random_floats(rows * H, 14);
  auto loss = [&](const std::vector<float>& xx, const std::vector<float>& g,
                  const std::vector<float>& d) {
    std::vector<float> h(rows * 2 * F), a(rows * F), y(rows * H);
    EXPECT_TRUE(expert_ffn_forward(pool, {E, H, F}, offset.data(), xx.data(), g.data(), d.data(),
                                   h.data(), a.data(), y.data())
                    .ok());
    double l = 0;
    for (int64_t i = 0; i < rows * H; ++i) l += double(y[i]) * gy[i];
    return l;
  };
  std::vector<float> h(rows * 2 * F), a(rows * F), y(rows * H);
  ASSERT_TRUE(expert_ffn_forward(pool, {E, H, F}, offset.data(), x.data(), wgu.data(), wd.data(),
                                 h.data(), a.data(), y.data())
                  .ok());
  std::vector<float> gx(rows * H), gwgu(wgu.size(), 9.0f), gwd(wd.size(), 9.0f);
  ASSERT_TRUE(expert_ffn_backward(pool, {E, H, F}, offset.data(), x.data(), wgu.data(), wd.data(),
                                  h.data(), a.data(), gy.data(), gx.data(), gwgu.data(), gwd.data())
                  .ok());
  const float eps = 1e-2f;
  for (size_t i = 0; i < x.size(); ++i) {
    auto p = x, m = x;
    p[i] += eps;
    m[i] -= eps;
    EXPECT_NEAR(gx[i], (loss(p, wgu, wd) - loss(m, wgu, wd)) / (2 * eps), 2e-3) << "x " << i;
  }
  for (size_t i = 0; i < wgu.size(); ++i) {
    auto p = wgu, m = wgu;
    p[i] += eps;
    m[i] -= eps;
    EXPECT_NEAR(gwgu[i], (loss(x, p, wd) - loss(x, m, wd)) / (2 * eps), 2e-3) << "w_gate_up " << i;
  }
  for (size_t i = 0; i < wd.size(); ++i) {
    auto p = wd, m = wd;
    p[i] += eps;
    m[i] -= eps;
    EXPECT_NEAR(gwd[i], (loss(x, wgu, p) - loss(x, wgu, m)) / (2 * eps), 2e-3) << "w_down " << i;
  }
  // The empty expert's gradients were overwritten with zeros.
  for (int64_t i = 2 * F * H; i < 4 * F * H; ++i) ASSERT_EQ(gwgu[i], 0.0f);
}

TEST(expert_ffn, accumulate_adds_weight_gradients_of_a_second_micro_batch) {
  thread_pool pool(1);
  const int E = 1;
  const int64_t H = 8, F = 4, rows = 3;
  const std::vector<int64_t> offset = {0, rows};
  auto x = random_floats(rows * H, 21);
  auto wgu = random_floats(2 * F * H, 22);
  auto wd = random_floats(H * F, 23);
  auto gy = random_floats(rows * H, 24);
  std::vector<float> h(rows * 2 * F), a(rows * F), y(rows * H), gx(rows * H);
  ASSERT_TRUE(expert_ffn_forward(pool, {E, H, F}, offset.data(), x.data(), wgu.data(), wd.data(),
                                 h.data(), a.data(), y.data())
                  .ok());
  std::vector<float> g1(wgu.size()), d1(wd.size()), g2(wgu.size()), d2(wd.size());
  ASSERT_TRUE(expert_ffn_backward(pool, {E, H, F}, offset.data(), x.data(), wgu.data(), wd.data(),
                                  h.data(), a.data(), gy.data(), gx.data(), g1.data(), d1.data())
                  .ok());
  g2 = g1;
  d2 = d1;
  ASSERT_TRUE(expert_ffn_backward(pool, {E, H, F}, offset.data(), x.data(), wgu.data(), wd.data(),
                                  h.data(), a.data(), gy.data(), gx.data(), g2.data(), d2.data(),
                                  true)
                  .ok());
  for (size_t i = 0; i < g1.size(); ++i) EXPECT_NEAR(g2[i], 2 * g1[i], 1e-5);
  for (size_t i = 0; i < d1.size(); ++i) EXPECT_NEAR(d2[i], 2 * d1[i], 1e-5);
}

TEST(expert_ffn, a_decreasing_offset_table_is_an_error) {
  thread_pool pool(1);
  const std::vector<int64_t> offset = {0, 4, 2};
  float dummy[64];
  auto st =
      expert_ffn_forward(pool, {2, 4, 4}, offset.data(), dummy, dummy, dummy, dummy, dummy, dummy);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.err().message.find("non-decreasing at expert 1"), std::string::npos)
      << st.err().message;
}
