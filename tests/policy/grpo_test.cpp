// GRPO plumbing: ratios are taken against the behaviour logprobs a sample carries (the
// off-policy correction), on-policy samples have ratio 1, and a run with the KL penalty
// keeps a frozen reference and reports a positive KL once the policy moves.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "policy/trainer.h"

namespace moerl::policy {
namespace {

model_config small() {
  model_config c;
  c.max_seq_len = 12;
  c.d_model = 32;
  c.num_layers = 1;
  c.num_heads = 2;
  c.num_experts = 4;
  c.top_k = 2;
  c.ffn_dim = 16;
  return c;
}

TEST(grpo_off_policy, ratio_is_taken_against_the_generating_versions_logprobs) {
  auto ex = make_local_expert_exchange();
  auto pol = std::move(moe_policy::create(small(), *ex)).value();
  auto t = make_sort_task(3);
  auto rm = make_verifier_reward(*t);
  std::mt19937_64 rng(1);
  auto stale = std::move(rollout(*pol, *t, 8, 4, 1.0f, rng, /*version*/ 0, 0)).value();
  ASSERT_TRUE(score_samples(*rm, &stale).ok());
  grpo_config gc;
  gc.group_size = 4;
  std::vector<float> grads;
  // On-policy: every ratio is 1 (up to float rounding between the two code paths).
  auto on = grpo_gradient(*pol, stale, group_advantages(stale), gc, 1.0f, nullptr, &grads);
  ASSERT_TRUE(on.ok());
  EXPECT_NEAR(on->grpo.mean_ratio, 1.0, 1e-4);
  EXPECT_EQ(on->grpo.clip_fraction, 0.0);

  // Move the policy on with fresh batches (versions 1..5); the first batch goes stale.
  adam opt(adam_config{}, pol->layout().num_floats());
  for (int v = 1; v <= 5; ++v) {
    auto fresh = std::move(rollout(*pol, *t, 8, 4, 1.0f, rng, v, v * 8)).value();
    ASSERT_TRUE(score_samples(*rm, &fresh).ok());
    ASSERT_TRUE(
        grpo_gradient(*pol, fresh, group_advantages(fresh), gc, 1.0f, nullptr, &grads).ok());
    ASSERT_TRUE(opt.step(pol->params(), grads).ok());
  }
  auto now = std::move(completion_logprobs(*pol, stale, 1.0f)).value();
  double want = 0;
  int64_t n = 0;
  for (size_t i = 0; i < stale.size(); ++i)
    for (size_t j = 0; j < stale[i].completion.size(); ++j, ++n)
      want += std::exp(double(now[i][j]) - stale[i].behaviour_logprobs[j]);
  want /= n;
  auto off = grpo_gradient(*pol, stale, group_advantages(stale), gc, 1.0f, nullptr, &grads);
  ASSERT_TRUE(off.ok());
  EXPECT_GT(std::fabs(off->grpo.mean_ratio - 1.0), 1e-3) << "the policy did not move";
  EXPECT_NEAR(off->grpo.mean_ratio, want, 1e-5);
}

// grpo_gradient end to end (token logprobs at a temperature, GRPO loss, the model's
// backward, the MoE aux loss) against finite differences of the loss it reports.
TEST(grpo_gradient, matches_finite_differences_of_the_reported_loss) {
  model_config c = small();
  c.aux_loss_coef = 0.02f;
  auto ex = make_local_expert_exchange();
  auto pol = std::move(moe_policy::create(c, *ex)).value();
  std::mt19937_64 prng(6);
  std::normal_distribution<float> nd(0.0f, 0.2f);
  for (auto& x : pol->params()) x += nd(prng);
  auto t = make_sort_task(3);
  auto rm = make_verifier_reward(*t);
  const float temp = 0.7f;
  std::mt19937_64 rng(2);
  auto s = std::move(rollout(*pol, *t, 3, 4, temp, rng, 0, 0)).value();
  ASSERT_TRUE(score_samples(*rm, &s).ok());
  auto adv = group_advantages(s);
  grpo_config gc;
  gc.group_size = 4;
  std::vector<float> grads, scratch;
  auto loss_at = [&]() {
    auto u = grpo_gradient(*pol, s, adv, gc, temp, nullptr, &scratch);
    EXPECT_TRUE(u.ok());
    return u->grpo.loss + u->aux_loss;
  };
  ASSERT_TRUE(grpo_gradient(*pol, s, adv, gc, temp, nullptr, &grads).ok());
  int checked = 0;
  for (const auto& ts : pol->layout().tensors()) {
    std::uniform_int_distribution<size_t> pick(0, ts.size() - 1);
    for (int k = 0; k < 3; ++k) {
      const size_t i = ts.offset + pick(rng);
      const float orig = pol->params()[i];
      const float e = 2e-3f;
      pol->params()[i] = orig + e;
      const double up = loss_at();
      pol->params()[i] = orig - e;
      const double dn = loss_at();
      pol->params()[i] = orig;
      const double fd = (up - dn) / (2.0 * e);
      EXPECT_NEAR(grads[i], fd, 3e-3 + 3e-2 * std::fabs(fd)) << ts.name;
      ++checked;
    }
  }
  EXPECT_GT(checked, 20);
}

TEST(grpo_kl, run_with_kl_penalty_reports_divergence_from_the_frozen_reference) {
  auto ex = make_local_expert_exchange();
  auto pol = std::move(moe_policy::create(small(), *ex)).value();
  auto t = make_sort_task(2);
  auto rm = make_verifier_reward(*t);
  train_config tc;
  tc.iterations = 8;
  tc.prompts_per_iteration = 8;
  tc.grpo.group_size = 4;
  tc.grpo.kl_coef = 0.1;
  tc.adam.learning_rate = 3e-3;
  auto curve = train_single_process(*pol, *t, *rm, tc, {});
  ASSERT_TRUE(curve.ok()) << curve.err().to_string();
  ASSERT_EQ(curve->size(), 8u);
  EXPECT_EQ(curve->front().update.grpo.kl, 0.0);  // first update: policy == reference
  EXPECT_GT(curve->back().update.grpo.kl, 0.0);
  // A reference needs kl_coef's gradient path: without one the call is refused.
  grpo_config gc = tc.grpo;
  std::mt19937_64 rng(3);
  auto s = std::move(rollout(*pol, *t, 2, 4, 1.0f, rng, 0, 0)).value();
  std::vector<float> grads;
  auto r = grpo_gradient(*pol, s, group_advantages(s), gc, 1.0f, nullptr, &grads);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::invalid_argument);
}

}  // namespace
}  // namespace moerl::policy
