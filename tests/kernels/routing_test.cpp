#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/routing.h"
#include "test_util.h"

using namespace moerl::kernels;
using namespace moerl::kernels::testing;

TEST(routing, softmax_topk_picks_the_largest_scores_best_first_and_renormalises) {
  thread_pool pool(1);
  routing_params p;
  p.num_experts = 4;
  p.topk = 2;
  const float logits[4] = {0.1f, 2.0f, -1.0f, 1.0f};
  float scores[4], w[2];
  int64_t idx[2];
  ASSERT_TRUE(route_forward(pool, p, logits, nullptr, nullptr, 1, scores, idx, w).ok());
  EXPECT_EQ(idx[0], 1);
  EXPECT_EQ(idx[1], 3);
  float z = 0;
  for (float l : logits) z += std::exp(l);
  EXPECT_NEAR(scores[1], std::exp(2.0f) / z, 1e-6);
  EXPECT_NEAR(w[0], std::exp(2.0f) / (std::exp(2.0f) + std::exp(1.0f)), 1e-6);
  EXPECT_NEAR(w[0] + w[1], 1.0f, 1e-6);
}

TEST(routing, sigmoid_with_bias_selects_by_biased_score_but_weights_by_raw_score) {
  thread_pool pool(1);
  routing_params p;
  p.num_experts = 3;
  p.topk = 1;
  p.scoring = score_function::sigmoid;
  p.renormalize = false;
  p.route_scale = 2.5f;
  const float logits[3] = {1.0f, 0.0f, -1.0f};
  const float bias[3] = {0.0f, 0.0f, 1.0f};  // lifts expert 2 above expert 0
  float scores[3], w[1];
  int64_t idx[1];
  ASSERT_TRUE(route_forward(pool, p, logits, bias, nullptr, 1, scores, idx, w).ok());
  EXPECT_EQ(idx[0], 2);
  EXPECT_NEAR(w[0], 2.5f / (1.0f + std::exp(1.0f)), 1e-6);
}

TEST(routing, group_limited_routing_only_chooses_inside_the_best_groups) {
  thread_pool pool(1);
  routing_params p;
  p.num_experts = 8;
  p.topk = 2;
  p.num_groups = 4;
  p.topk_groups = 1;
  p.scoring = score_function::sigmoid;
  // group sums of the two best: g0 = {3, -5}, g1 = {2, 2} wins although expert 0 is best.
  const float logits[8] = {3, -5, 2, 2, -3, -3, -4, -4};
  float scores[8], w[2];
  int64_t idx[2];
  ASSERT_TRUE(route_forward(pool, p, logits, nullptr, nullptr, 1, scores, idx, w).ok());
  EXPECT_EQ(idx[0], 2);
  EXPECT_EQ(idx[1], 3);
}

TEST(routing, a_masked_token_gets_minus_one_entries_and_zero_weight) {
  thread_pool pool(1);
  routing_params p;
  p.num_experts = 4;
  p.topk = 4;  // topk == num_experts
  auto logits = random_floats(8, 1);
  const uint8_t mask[2] = {1, 0};
  float scores[8], w[8];
  int64_t idx[8];
  ASSERT_TRUE(route_forward(pool, p, logits.data(), nullptr, mask, 2, scores, idx, w).ok());
  for (int k = 0; k < 4; ++k) {
    EXPECT_GE(idx[k], 0);
    EXPECT_EQ(idx[4 + k], -1);
    EXPECT_EQ(w[4 + k], 0.0f);
  }
}

TEST(routing, inconsistent_parameters_are_errors_naming_the_parameter) {
  thread_pool pool(1);
  float buf[16];
  int64_t idx[16];
  routing_params p;
  p.num_experts = 6;
  p.topk = 7;
  auto st = route_forward(pool, p, buf, nullptr, nullptr, 1, buf, idx, buf);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.err().message.find("topk = 7"), std::string::npos);
  p.topk = 2;
  p.num_groups = 4;
  st = route_forward(pool, p, buf, nullptr, nullptr, 1, buf, idx, buf);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.err().message.find("num_groups = 4"), std::string::npos);
}

// Finite differences through the whole forward with the routing choice held fixed.
TEST(routing, backward_matches_finite_differences_for_softmax_and_sigmoid) {
  thread_pool pool(2);
  for (auto scoring : {score_function::softmax, score_function::sigmoid})
    for (bool renorm : {true, false}) {
      routing_params p;
      p.num_experts = 6;
      p.topk = 3;
      p.scoring = scoring;
      p.renormalize = renorm;
      p.route_scale = 1.5f;
      const int64_t T = 4;
      auto logits = random_floats(T * 6, 41, -2, 2);
      auto gw = random_floats(T * 3, 42);
      auto extra = random_floats(T * 6, 43);
      std::vector<float> scores(T * 6), w(T * 3), gl(T * 6);
      std::vector<int64_t> idx(T * 3);
      ASSERT_TRUE(route_forward(pool, p, logits.data(), nullptr, nullptr, T, scores.data(),
                                idx.data(), w.data())
                      .ok());
      ASSERT_TRUE(
          route_backward(pool, p, scores.data(), idx.data(), gw.data(), extra.data(), T, gl.data())
              .ok());
      // loss = sum(w * gw) + sum(scores * extra), with the chosen experts frozen.
      auto loss = [&](const std::vector<float>& z) {
        std::vector<float> s(T * 6), ww(T * 3);
        std::vector<int64_t> ii(T * 3);
        EXPECT_TRUE(
            route_forward(pool, p, z.data(), nullptr, nullptr, T, s.data(), ii.data(), ww.data())
                .ok());
        EXPECT_EQ(ii, idx);
        double l = 0;
        for (int i = 0; i < T * 3; ++i) l += double(ww[i]) * gw[i];
        for (int i = 0; i < T * 6; ++i) l += double(s[i]) * extra[i];
        return l;
      };
      for (int i = 0; i < T * 6; ++i) {
        auto zp = logits, zm = logits;
        zp[i] += 1e-3f;
        zm[i] -= 1e-3f;
        EXPECT_NEAR(gl[i], (loss(zp) - loss(zm)) / 2e-3, 2e-3) << "logit " << i;
      }
    }
}

TEST(routing, ties_go_to_the_lower_expert_index_in_order) {
  thread_pool pool(1);
  routing_params p;
  p.num_experts = 8;
  p.topk = 3;
  // Experts 5, 2 and 6 share the best logit, 1 is next: 2, 5, 6 in index order win.
  const float logits[8] = {0.f, 1.f, 3.f, 0.f, 0.f, 3.f, 3.f, 0.f};
  float scores[8], w[3];
  int64_t idx[3];
  ASSERT_TRUE(route_forward(pool, p, logits, nullptr, nullptr, 1, scores, idx, w).ok());
  EXPECT_EQ(idx[0], 2);
  EXPECT_EQ(idx[1], 5);
  EXPECT_EQ(idx[2], 6);
  const float flat[8] = {};
  ASSERT_TRUE(route_forward(pool, p, flat, nullptr, nullptr, 1, scores, idx, w).ok());
  EXPECT_EQ(idx[0], 0);
  EXPECT_EQ(idx[1], 1);
  EXPECT_EQ(idx[2], 2);
}
