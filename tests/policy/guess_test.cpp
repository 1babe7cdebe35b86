// The multi-turn "guess" task's environment: replies lead to the hidden number, the budget
// ends an episode, malformed actions are refused by name and leave the episode as it was,
// and the bounds docs/GUIDE.md quotes are what they say. Plus GRPO's handling of environment
// tokens: they carry no loss.
#include <gtest/gtest.h>

#include "policy/grpo.h"
#include "policy/tasks/guess.h"

namespace moerl::policy {
namespace {

TEST(guess_env, binary_search_on_the_replies_finds_every_number_in_four_turns) {
  for (uint64_t seed = 0; seed < 10; ++seed) {
    guess_env env;
    auto first = env.reset(4, seed);
    ASSERT_TRUE(first.ok());
    EXPECT_EQ(first->observation, guess_prompt(4));
    int lo = 0, hi = 9;
    bool found = false;
    for (int turn = 0; turn < 4 && !found; ++turn) {
      const int g = (lo + hi) / 2;
      auto r = env.step({digit_token(g)});
      ASSERT_TRUE(r.ok()) << r.err().message;
      if (r->done) {
        found = r->reward == 1.0;
        break;
      }
      ASSERT_EQ(r->observation.size(), 1u);
      if (r->observation[0] == guess_reply_higher)
        lo = g + 1;
      else
        hi = g - 1;
    }
    EXPECT_TRUE(found) << "seed " << seed;
  }
}

TEST(guess_env, the_budget_ends_an_episode_with_reward_zero_and_non_digits_forfeit) {
  guess_env env;
  ASSERT_TRUE(env.reset(2, 7).ok());  // hidden 7
  auto a = env.step({digit_token(0)});
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->done);
  EXPECT_EQ(a->observation, std::vector<token_id>{guess_reply_higher});
  auto b = env.step({digit_token(1)});
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->done);
  EXPECT_EQ(b->reward, 0.0);
  auto after = env.step({digit_token(7)});
  ASSERT_FALSE(after.ok());
  EXPECT_NE(after.err().message.find("after the episode ended"), std::string::npos);

  ASSERT_TRUE(env.reset(4, 3).ok());
  auto forfeit = env.step({tok_eos});
  ASSERT_TRUE(forfeit.ok());
  EXPECT_TRUE(forfeit->done);
  EXPECT_EQ(forfeit->reward, 0.0);
}

TEST(guess_env, malformed_actions_are_refused_by_name_and_change_nothing) {
  guess_env env;
  EXPECT_FALSE(env.step({digit_token(1)}).ok());  // before reset
  ASSERT_TRUE(env.reset(4, 5).ok());
  auto two = env.step({digit_token(1), digit_token(2)});
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.err().message.find("one token, got 2"), std::string::npos);
  auto outside = env.step({num_vocab + 3});
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.err().message.find("outside the vocabulary"), std::string::npos);
  EXPECT_EQ(env.num_turns_used(), 0);
  auto hit = env.step({digit_token(5)});
  ASSERT_TRUE(hit.ok());
  EXPECT_TRUE(hit->done);
  EXPECT_EQ(hit->reward, 1.0);
  EXPECT_FALSE(env.reset(0, 1).ok());
  EXPECT_FALSE(parse_guess_prompt({tok_bos, tok_equals}).ok());
  EXPECT_EQ(parse_guess_prompt(guess_prompt(4)).value(), 4);
}

TEST(guess_bounds, single_turn_open_loop_and_closed_loop_bounds) {
  EXPECT_DOUBLE_EQ(guess_single_turn_bound(), 0.1);
  EXPECT_DOUBLE_EQ(guess_open_loop_bound(4), 0.4);
  EXPECT_DOUBLE_EQ(guess_closed_loop_bound(4), 1.0);
  EXPECT_DOUBLE_EQ(guess_closed_loop_bound(3), 0.7);
  // Random: 1/16 per turn to hit, 9/16 to go on.
  EXPECT_NEAR(guess_reward_random(1), 1.0 / 16, 1e-12);
  EXPECT_NEAR(guess_reward_random(2), 1.0 / 16 + 9.0 / 256, 1e-12);
}

TEST(grpo_env_tokens, environment_tokens_carry_no_loss_and_no_gradient) {
  std::vector<float> lp{-1.0f, -2.0f, -0.5f}, bl{-1.0f, -1.0f, -1.0f};
  std::vector<uint8_t> from_env{0, 1, 0};
  grpo_config cfg;
  std::vector<grpo_token_inputs> in{{lp.data(), bl.data(), nullptr, 3, 1.0, from_env.data()}};
  std::vector<std::vector<float>> d;
  auto st = grpo_loss(in, cfg, &d);
  EXPECT_EQ(st.num_tokens, 2);
  EXPECT_EQ(d[0][1], 0.0f);
  EXPECT_NE(d[0][0], 0.0f);
  // The same sample without its environment token: the same loss (mean over policy tokens).
  std::vector<float> lp2{-1.0f, -0.5f}, bl2{-1.0f, -1.0f};
  std::vector<grpo_token_inputs> in2{{lp2.data(), bl2.data(), nullptr, 2, 1.0}};
  std::vector<std::vector<float>> d2;
  auto st2 = grpo_loss(in2, cfg, &d2);
  EXPECT_NEAR(st.loss, st2.loss, 1e-9);
  EXPECT_NEAR(d[0][2], d2[0][1], 1e-7);
}

}  // namespace
}  // namespace moerl::policy
