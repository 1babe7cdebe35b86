// Tasks, vocabulary and verifiers: edge cases of scoring, malformed prompts, the random
// policy's expected reward against a Monte-Carlo estimate.
#include <gtest/gtest.h>

#include <random>

#include "policy/task.h"
#include "policy/vocab.h"

namespace moerl::policy {
namespace {

std::vector<token_id> enc(const std::string& s) {
  auto r = encode(s);
  EXPECT_TRUE(r.ok()) << s;
  return r.ok() ? *r : std::vector<token_id>{};
}

TEST(vocab, encode_and_decode_round_trip_every_token) {
  std::string all = "_^$0123456789+=s";
  EXPECT_EQ(decode(enc(all)), all);
  EXPECT_EQ(static_cast<int>(all.size()), num_vocab);
}

TEST(vocab, unknown_character_is_an_error_naming_it) {
  auto r = encode("^s3x=");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::invalid_argument);
  EXPECT_NE(r.err().message.find("'x'"), std::string::npos);
}

TEST(sort_task, exact_answer_scores_one_and_partial_answers_score_by_position) {
  auto t = make_sort_task(3);
  auto p = enc("^s312=");
  EXPECT_DOUBLE_EQ(*t->verify(p, enc("123$")), 1.0);
  EXPECT_DOUBLE_EQ(*t->verify(p, enc("133$")), 0.75);  // one digit wrong
  EXPECT_DOUBLE_EQ(*t->verify(p, enc("123")), 0.75);   // missing EOS
  EXPECT_DOUBLE_EQ(*t->verify(p, enc("12$")), 0.5);    // early EOS: position 2 wrong, EOS missing
  EXPECT_DOUBLE_EQ(*t->verify(p, enc("")), 0.0);       // empty completion
  EXPECT_DOUBLE_EQ(*t->verify(p, enc("$123$")), 0.0);  // nothing after the first EOS counts
  EXPECT_DOUBLE_EQ(*t->verify(p, enc("123$9999")), 1.0);  // tokens past the target ignored
  EXPECT_DOUBLE_EQ(*t->verify(p, enc("321$")), 0.5);      // reverse order: middle digit and EOS
}

TEST(sort_task, repeated_digits_and_all_equal_digits_sort_stably) {
  auto t = make_sort_task(4);
  EXPECT_DOUBLE_EQ(*t->verify(enc("^s9090="), enc("0099$")), 1.0);
  EXPECT_DOUBLE_EQ(*t->verify(enc("^s7777="), enc("7777$")), 1.0);
}

TEST(sort_task, malformed_prompts_are_errors_not_scores) {
  auto t = make_sort_task(3);
  for (const char* bad : {"^s31=", "^s3124=", "s312==", "^s3+2=", "^+312="}) {
    auto r = t->verify(enc(bad), enc("123$"));
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.err().code, errc::invalid_argument) << bad;
  }
}

TEST(add_task, answer_is_the_sum_least_significant_digit_first_with_a_carry_digit) {
  auto t = make_add_task(2);
  EXPECT_DOUBLE_EQ(*t->verify(enc("^99+99="), enc("891$")), 1.0);  // 198
  EXPECT_DOUBLE_EQ(*t->verify(enc("^00+00="), enc("000$")), 1.0);
  EXPECT_DOUBLE_EQ(*t->verify(enc("^12+34="), enc("640$")), 1.0);  // 46
  EXPECT_DOUBLE_EQ(*t->verify(enc("^12+34="), enc("460$")), 0.5);  // most-significant first
  auto r = t->verify(enc("^12+3="), enc("64$"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::invalid_argument);
}

TEST(tasks, generated_prompts_have_the_declared_shape_and_their_target_verifies) {
  std::mt19937_64 rng(7);
  for (auto name : {"sort", "add"})
    for (int diff : {1, 3, 5}) {
      auto t = make_task(name, diff);
      ASSERT_TRUE(t.ok());
      for (int i = 0; i < 50; ++i) {
        auto p = (*t)->generate(rng);
        EXPECT_EQ(static_cast<int>(p.tokens.size()), (*t)->prompt_length());
        EXPECT_EQ(static_cast<int>(p.target.size()), (*t)->max_completion_length());
        EXPECT_DOUBLE_EQ(*(*t)->verify(p.tokens, p.target), (*t)->reward_max());
      }
    }
}

TEST(tasks, unknown_name_or_out_of_range_difficulty_is_a_config_error) {
  EXPECT_EQ(make_task("multiply", 2).err().code, errc::invalid_config);
  EXPECT_EQ(make_task("sort", 0).err().code, errc::invalid_config);
  EXPECT_EQ(make_task("add", 9).err().code, errc::invalid_config);
}

// The closed form in task.h against the random policy it describes, sampled.
TEST(tasks, reward_random_matches_a_uniform_random_policy) {
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int> tok(0, num_vocab - 1);
  for (auto name : {"sort", "add"}) {
    auto t = std::move(make_task(name, 2)).value();
    const int trials = 200000;
    double sum = 0;
    for (int i = 0; i < trials; ++i) {
      auto p = t->generate(rng);
      std::vector<token_id> c;
      while (static_cast<int>(c.size()) < t->max_completion_length()) {
        c.push_back(tok(rng));
        if (c.back() == tok_eos) break;
      }
      sum += *t->verify(p.tokens, c);
    }
    // Standard error here is below 0.0005; 0.002 is four of them.
    EXPECT_NEAR(sum / trials, t->reward_random(), 0.002) << name;
    EXPECT_GT(t->reward_random(), 0.0);
    EXPECT_LT(t->reward_random(), 0.1);
  }
}

}  // namespace
}  // namespace moerl::policy
