// The test work must be real, deterministic and checkable: these tests would fail if
// generation were faked, non-deterministic, or if the checker accepted altered samples.
#include <gtest/gtest.h>

#include "job/modpow_work.h"

using namespace moerl::job;

TEST(modpow_work, same_prompt_index_and_version_generate_identical_samples) {
  modpow_work w;
  auto p = modpow_prompt(7, 1, 50);
  auto a = w.generate(p, 1, 2, 3), b = w.generate(p, 1, 2, 3);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_EQ(a->tokens.size(), 50u);
  EXPECT_TRUE(modpow_check(*a, 3));
}

TEST(modpow_work, checker_rejects_a_changed_token_or_a_different_policy_version) {
  modpow_work w;
  auto s = w.generate(modpow_prompt(11, 0, 40), 0, 0, 1);
  ASSERT_TRUE(s);
  auto bad = *s;
  bad.tokens[17] ^= 1;
  EXPECT_FALSE(modpow_check(bad, 1));
  // Some version among a few must change the slip pattern of some response in a group.
  bool differs = false;
  for (uint32_t idx = 0; idx < 8 && !differs; ++idx) {
    auto x = w.generate(modpow_prompt(11, 0, 40), 0, idx, 1);
    differs = !modpow_check(*x, 2);
  }
  EXPECT_TRUE(differs);
}

TEST(modpow_work, rewards_differ_inside_a_group_and_match_an_independent_method) {
  modpow_work w;
  modpow_reward r;
  int ones = 0, zeros = 0;
  for (uint32_t idx = 0; idx < 24; ++idx) {
    auto s = w.generate(modpow_prompt(3, 0, 30), 0, idx, 5);
    ASSERT_TRUE(s);
    auto score = r.score(s->prompt, s->tokens);
    ASSERT_TRUE(score);
    (*score == 1.0f ? ones : zeros)++;
  }
  EXPECT_GT(ones, 0);
  EXPECT_GT(zeros, 0);
}

TEST(modpow_work, malformed_prompt_and_response_get_errors_naming_the_problem) {
  modpow_work w;
  modpow_reward r;
  auto bad = w.generate({1, 2, 3}, 0, 0, 0);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.err().message.find("4 tokens"), std::string::npos);
  auto p = modpow_prompt(1, 0, 10);
  auto s = r.score(p, {1, 2, 3});
  ASSERT_FALSE(s);
  EXPECT_NE(s.err().message.find("prompt asks for 10"), std::string::npos);
}
