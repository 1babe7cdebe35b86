#include <gtest/gtest.h>

#include <vector>

#include "kernels/load_stats.h"
#include "test_util.h"

using namespace moerl::kernels;
using namespace moerl::kernels::testing;

TEST(load_stats, counts_skip_masked_entries_and_imbalance_is_max_over_mean) {
  thread_pool pool(1);
  const std::vector<int64_t> idx = {0, 1, 0, -1, 0, 2};
  std::vector<int64_t> c(4);
  ASSERT_TRUE(count_tokens_per_expert(pool, idx.data(), 3, 2, 4, c.data()).ok());
  EXPECT_EQ(c, (std::vector<int64_t>{3, 1, 1, 0}));
  EXPECT_DOUBLE_EQ(load_imbalance(c.data(), 4), 3.0 / (5.0 / 4.0));
  const int64_t none[2] = {0, 0};
  EXPECT_EQ(load_imbalance(none, 2), 0.0);
}

TEST(load_stats, an_invalid_expert_id_is_an_error) {
  thread_pool pool(1);
  const int64_t idx[2] = {0, 4};
  int64_t c[4];
  auto st = count_tokens_per_expert(pool, idx, 2, 1, 4, c);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.err().message.find("topk_idx[1, 0] = 4"), std::string::npos) << st.err().message;
}

TEST(load_stats, aux_loss_is_one_times_coeff_for_perfectly_uniform_routing) {
  thread_pool pool(1);
  // 4 tokens, 4 experts, top-1, each expert once, uniform probabilities: loss = coeff.
  const std::vector<int64_t> idx = {0, 1, 2, 3};
  std::vector<float> scores(16, 0.25f), grad(16);
  float loss = 0;
  ASSERT_TRUE(
      load_balance_loss(pool, scores.data(), idx.data(), 4, 4, 1, 0.01f, &loss, grad.data()).ok());
  EXPECT_NEAR(loss, 0.01f, 1e-8);
  // d loss / d scores[t,e] = coeff * E * f_e / N = 0.01 * 4 * 0.25 / 4
  for (float g : grad) EXPECT_NEAR(g, 0.0025f, 1e-9);
}

TEST(load_stats, aux_loss_ignores_padding_tokens_and_all_to_one_expert_is_maximal) {
  thread_pool pool(1);
  const std::vector<int64_t> idx = {2, 2, -1};  // third token is padding
  std::vector<float> scores = {0, 0, 1, 0, 0, 1, 0.5f, 0.5f, 0};
  std::vector<float> grad(9);
  float loss = 0;
  ASSERT_TRUE(
      load_balance_loss(pool, scores.data(), idx.data(), 3, 3, 1, 1.0f, &loss, grad.data()).ok());
  EXPECT_NEAR(loss, 3.0f, 1e-6);  // E * f_2 * P_2 = 3 * 1 * 1
  for (int e = 0; e < 3; ++e) EXPECT_EQ(grad[6 + e], 0.0f);
  float none = -1;
  const int64_t masked[2] = {-1, -1};
  ASSERT_TRUE(load_balance_loss(pool, scores.data(), masked, 2, 3, 1, 1.0f, &none, nullptr).ok());
  EXPECT_EQ(none, 0.0f);
}
