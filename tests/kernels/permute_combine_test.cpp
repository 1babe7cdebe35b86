#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/combine.h"
#include "kernels/permute.h"
#include "test_util.h"

using namespace moerl::kernels;
using namespace moerl::kernels::testing;

TEST(permute, rows_land_at_their_slots_and_padding_rows_are_zero) {
  thread_pool pool(2);
  const int64_t T = 37, H = 130;  // hidden not a multiple of 128
  const int K = 3, E = 6;
  auto idx = random_topk_idx(T, K, E, 1, 0.2);
  auto s = make_slots(pool, idx, T, K, E, 8);
  auto x = random_floats(T * H, 2);
  std::vector<float> p(s.num_rows * H, 99.0f);
  ASSERT_TRUE(permute_forward(pool, x.data(), s.slot.data(), T, K, H, s.num_rows, p.data()).ok());
  std::vector<int> named(s.num_rows, 0);
  for (int64_t t = 0; t < T; ++t)
    for (int k = 0; k < K; ++k) {
      const int64_t r = s.slot[t * K + k];
      if (r < 0) continue;
      named[r] = 1;
      ASSERT_EQ(0, std::memcmp(&p[r * H], &x[t * H], H * sizeof(float)));
    }
  for (int64_t r = 0; r < s.num_rows; ++r)
    if (!named[r]) {
      for (int64_t j = 0; j < H; ++j) ASSERT_EQ(p[r * H + j], 0.0f);
    }
}

TEST(permute, unpermute_after_permute_returns_each_token_per_entry) {
  thread_pool pool(2);
  const int64_t T = 20, H = 64;
  const int K = 4, E = 4;  // topk == num_experts
  auto idx = random_topk_idx(T, K, E, 3);
  auto s = make_slots(pool, idx, T, K, E);
  auto x = random_floats(T * H, 4);
  std::vector<float> p(s.num_rows * H), u(T * K * H);
  ASSERT_TRUE(permute_forward(pool, x.data(), s.slot.data(), T, K, H, s.num_rows, p.data()).ok());
  ASSERT_TRUE(unpermute_forward(pool, p.data(), s.slot.data(), T, K, H, s.num_rows, u.data()).ok());
  for (int64_t t = 0; t < T; ++t)
    for (int k = 0; k < K; ++k) ASSERT_EQ(0, std::memcmp(&u[(t * K + k) * H], &x[t * H], H * 4));
}

TEST(permute, backward_sums_the_gradient_of_every_copy_of_a_token) {
  thread_pool pool(2);
  const int64_t T = 9, H = 5;
  const int K = 2, E = 3;
  auto idx = random_topk_idx(T, K, E, 5, 0.3);
  auto s = make_slots(pool, idx, T, K, E);
  auto g = random_floats(s.num_rows * H, 6);
  std::vector<float> gx(T * H);
  ASSERT_TRUE(permute_backward(pool, g.data(), s.slot.data(), T, K, H, s.num_rows, gx.data()).ok());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < H; ++j) {
      float want = 0.0f;
      for (int k = 0; k < K; ++k)
        if (s.slot[t * K + k] >= 0) want += g[s.slot[t * K + k] * H + j];
      ASSERT_EQ(gx[t * H + j], want);
    }
}

TEST(permute, a_slot_named_twice_or_out_of_range_is_an_error) {
  thread_pool pool(1);
  std::vector<float> x(2 * 4, 1.0f), p(4 * 4);
  const int64_t dup[2] = {1, 1};
  auto st = permute_forward(pool, x.data(), dup, 2, 1, 4, 4, p.data());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.err().message.find("row 1 is named"), std::string::npos) << st.err().message;
  const int64_t far[2] = {0, 4};
  st = permute_forward(pool, x.data(), far, 2, 1, 4, 4, p.data());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.err().message.find("outside"), std::string::npos) << st.err().message;
}

TEST(combine, weighted_sum_matches_a_reference_and_masked_tokens_get_zero) {
  thread_pool pool(2);
  const int64_t T = 31, H = 200;
  const int K = 4, E = 8;
  auto idx = random_topk_idx(T, K, E, 7, 0.25);
  for (int k = 0; k < K; ++k) idx[3 * K + k] = -1;  // a fully masked token
  auto s = make_slots(pool, idx, T, K, E);
  auto y = random_floats(s.num_rows * H, 8);
  auto w = random_floats(T * K, 9, 0.0f, 1.0f);
  std::vector<float> out(T * H, 5.0f);
  ASSERT_TRUE(
      combine_forward(pool, y.data(), s.slot.data(), w.data(), T, K, H, s.num_rows, out.data())
          .ok());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < H; ++j) {
      float want = 0.0f;
      for (int k = 0; k < K; ++k)
        if (s.slot[t * K + k] >= 0) want += w[t * K + k] * y[s.slot[t * K + k] * H + j];
      ASSERT_EQ(out[t * H + j], want) << t << "," << j;
    }
  for (int64_t j = 0; j < H; ++j) EXPECT_EQ(out[3 * H + j], 0.0f);
}

TEST(combine, results_are_bitwise_identical_for_any_pool_size_and_repeat) {
  const int64_t T = 257, H = 300;
  const int K = 8, E = 32;
  thread_pool one(1), three(3);
  auto idx = random_topk_idx(T, K, E, 11);
  auto s = make_slots(one, idx, T, K, E);
  auto y = random_floats(s.num_rows * H, 12, -100.0f, 100.0f);
  auto w = random_floats(T * K, 13, 0.0f, 1.0f);
  std::vector<float> a(T * H), b(T * H), c(T * H);
  ASSERT_TRUE(
      combine_forward(one, y.data(), s.slot.data(), w.data(), T, K, H, s.num_rows, a.data()).ok());
  ASSERT_TRUE(
      combine_forward(three, y.data(), s.slot.data(), w.data(), T, K, H, s.num_rows, b.data())
          .ok());
  ASSERT_TRUE(
      combine_forward(three, y.data(), s.slot.data(), w.data(), T, K, H, s.num_rows, c.data())
          .ok());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
  EXPECT_EQ(0, std::memcmp(b.data(), c.data(), b.size() * 4));
}

TEST(combine, backward_matches_finite_differences_of_a_scalar_loss) {
  thread_pool pool(2);
  const int64_t T = 6, H = 10;
  const int K = 3, E = 5;
  auto idx = random_topk_idx(T, K, E, 21, 0.2);
  auto s = make_slots(pool, idx, T, K, E);
  auto y = random_floats(s.num_rows * H, 22);
  auto w = random_floats(T * K, 23, 0.0f, 1.0f);
  auto gout = random_floats(T * H, 24);
  // loss = sum(out * gout), so dloss/dout = gout.
  auto loss = [&](const std::vector<float>& yy, const std::vector<float>& ww) {
    std::vector<float> out(T * H);
    EXPECT_TRUE(
        combine_forward(pool, yy.data(), s.slot.data(), ww.data(), T, K, H, s.num_rows, out.data())
            .ok());
    double l = 0;
    for (int64_t i = 0; i < T * H; ++i) l += double(out[i]) * gout[i];
    return l;
  };
  std::vector<float> gy(s.num_rows * H), gw(T * K);
  ASSERT_TRUE(combine_backward(pool, gout.data(), y.data(), s.slot.data(), w.data(), T, K, H,
                               s.num_rows, gy.data(), gw.data())
                  .ok());
  const float eps = 1e-2f;
  for (int64_t i = 0; i < T * K; ++i) {
    auto wp = w, wm = w;
    wp[i] += eps;
    wm[i] -= eps;
    EXPECT_NEAR(gw[i], (loss(y, wp) - loss(y, wm)) / (2 * eps), 1e-3) << "weight " << i;
  }
  for (int64_t i = 0; i < s.num_rows * H; i += 7) {
    auto yp = y, ym = y;
    yp[i] += eps;
    ym[i] -= eps;
    EXPECT_NEAR(gy[i], (loss(yp, w) - loss(ym, w)) / (2 * eps), 1e-3) << "row value " << i;
  }
}

TEST(combine, bf16_storage_matches_fp32_within_bf16_rounding) {
  thread_pool pool(2);
  const int64_t T = 40, H = 129;
  const int K = 2, E = 4;
  auto idx = random_topk_idx(T, K, E, 31);
  auto s = make_slots(pool, idx, T, K, E);
  auto y = random_floats(s.num_rows * H, 32);
  auto w = random_floats(T * K, 33, 0.0f, 1.0f);
  std::vector<bf16> yb(y.size()), ob(T * H);
  for (size_t i = 0; i < y.size(); ++i) {
    yb[i] = float_to_bf16(y[i]);
    y[i] = bf16_to_float(yb[i]);  // fp32 reference on the same (rounded) inputs
  }
  std::vector<float> of(T * H);
  ASSERT_TRUE(
      combine_forward(pool, y.data(), s.slot.data(), w.data(), T, K, H, s.num_rows, of.data())
          .ok());
  ASSERT_TRUE(
      combine_forward(pool, yb.data(), s.slot.data(), w.data(), T, K, H, s.num_rows, ob.data())
          .ok());
  for (int64_t i = 0; i < T * H; ++i) EXPECT_EQ(ob[i].bits, float_to_bf16(of[i]).bits);
}

// bf16 rows go through an 8-lane path (AVX2 where the CPU has it, kernels/cpu/combine.cpp):
// every element must still be the per-element definition (fp32 from 0, k order, one
// rounding), on arbitrary bit patterns (-0, infinities, subnormals, NaNs) and a row length
// that leaves a tail; a NaN result must be NaN (which NaN's payload survives when two meet
// is the hardware's operand order, not part of the definition).
TEST(combine, bf16_rows_equal_the_per_element_definition_on_any_bit_pattern) {
  thread_pool pool(2);
  const int64_t T = 24, H = 7168 + 21;
  const int K = 3, E = 5;
  auto idx = random_topk_idx(T, K, E, 41);
  idx[0] = -1;  // a masked entry
  auto s = make_slots(pool, idx, T, K, E);
  std::vector<bf16> rows(static_cast<size_t>(s.num_rows * H));
  uint32_t state = 12345;
  auto next = [&] { return state = state * 1664525u + 1013904223u; };
  for (auto& r : rows) r.bits = static_cast<uint16_t>(next() >> 16);
  for (int64_t i = 0; i < H; i += 97) rows[static_cast<size_t>(i)].bits = 0x8000;  // -0
  auto w = random_floats(T * K, 43, -2.0f, 2.0f);
  w[1] = 1.0f;
  std::vector<bf16> out(static_cast<size_t>(T * H));
  ASSERT_TRUE(
      combine_forward(pool, rows.data(), s.slot.data(), w.data(), T, K, H, s.num_rows, out.data())
          .ok());
  int64_t nans = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      float a = 0.0f;
      for (int k = 0; k < K; ++k) {
        const int64_t r = s.slot[t * K + k];
        if (r >= 0) a += w[t * K + k] * bf16_to_float(rows[static_cast<size_t>(r * H + h)]);
      }
      const uint16_t want = float_to_bf16(a).bits, got = out[static_cast<size_t>(t * H + h)].bits;
      if ((want & 0x7fff) > 0x7f80) {
        ++nans;
        ASSERT_GT(got & 0x7fff, 0x7f80) << "token " << t << " element " << h;
      } else {
        ASSERT_EQ(got, want) << "token " << t << " element " << h;
      }
    }
  EXPECT_GT(nans, 0);  // the patterns did reach the NaN case
}

TEST(combine, backward_refuses_a_row_named_twice_and_forward_an_out_of_range_slot) {
  thread_pool pool(1);
  std::vector<float> y(4 * 3, 1.0f), g(2 * 3, 1.0f), gy(4 * 3), gw(2), out(2 * 3);
  const float w[2] = {0.5f, 0.5f};
  const int64_t dup[2] = {2, 2};
  auto st = combine_backward(pool, g.data(), y.data(), dup, w, 2, 1, 3, 4, gy.data(), gw.data());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.err().message.find("combine_backward: row 2 is named"), std::string::npos)
      << st.err().message;
  const int64_t far[2] = {0, -2};
  st = combine_forward(pool, y.data(), far, w, 2, 1, 3, 4, out.data());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.err().message.find("token_expert_slot[1, 0] = -2"), std::string::npos)
      << st.err().message;
}

// The row-pointer form reduces exactly like the slot form, wherever the rows lie: each term's
// row is copied into a buffer of its own (as fabric's zero-copy combine reads them from
// several peers' memory) and the results must be bitwise equal, bf16 and fp32.
TEST(combine, row_pointer_form_equals_the_slot_form_bitwise_with_rows_in_separate_buffers) {
  thread_pool pool(3);
  const int64_t T = 33, H = 131;
  const int K = 3, E = 5;
  auto idx = random_topk_idx(T, K, E, 41, 0.25);  // masked entries: null terms
  auto s = make_slots(pool, idx, T, K, E);
  auto y = random_floats(s.num_rows * H, 42);
  auto w = random_floats(T * K, 43, 0.0f, 1.0f);
  std::vector<bf16> yb(y.size());
  for (size_t i = 0; i < y.size(); ++i) yb[i] = float_to_bf16(y[i]);
  std::vector<std::vector<float>> own_f(T * K);
  std::vector<std::vector<bf16>> own_b(T * K);
  std::vector<const float*> rows_f(T * K, nullptr);
  std::vector<const bf16*> rows_b(T * K, nullptr);
  for (int64_t i = 0; i < T * K; ++i) {
    if (s.slot[i] < 0) continue;
    own_f[i].assign(y.begin() + s.slot[i] * H, y.begin() + (s.slot[i] + 1) * H);
    own_b[i].assign(yb.begin() + s.slot[i] * H, yb.begin() + (s.slot[i] + 1) * H);
    rows_f[i] = own_f[i].data();
    rows_b[i] = own_b[i].data();
  }
  std::vector<float> want_f(T * H), got_f(T * H, 7.0f);
  std::vector<bf16> want_b(T * H), got_b(T * H);
  ASSERT_TRUE(
      combine_forward(pool, y.data(), s.slot.data(), w.data(), T, K, H, s.num_rows, want_f.data())
          .ok());
  ASSERT_TRUE(
      combine_forward(pool, yb.data(), s.slot.data(), w.data(), T, K, H, s.num_rows, want_b.data())
          .ok());
  ASSERT_TRUE(combine_rows_forward(pool, rows_f.data(), w.data(), T, K, H, got_f.data()).ok());
  ASSERT_TRUE(combine_rows_forward(pool, rows_b.data(), w.data(), T, K, H, got_b.data()).ok());
  EXPECT_EQ(0, std::memcmp(want_f.data(), got_f.data(), want_f.size() * sizeof(float)));
  for (int64_t i = 0; i < T * H; ++i) ASSERT_EQ(want_b[i].bits, got_b[i].bits) << i;
  auto st = combine_rows_forward(pool, static_cast<const float* const*>(nullptr), w.data(), T, K, H,
                                 got_f.data());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.err().message.find("combine_rows_forward: null input"), std::string::npos);
}
