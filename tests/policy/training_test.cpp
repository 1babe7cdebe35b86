// A short single-process GRPO run on the default task: the mean reward must rise clearly
// above the random policy's expected reward. Configuration is the schema's defaults with
// a shorter run, so the test exercises what users run.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "policy/trainer.h"

namespace moerl::policy {
namespace {

TEST(policy_training, grpo_lifts_mean_reward_well_above_the_random_policy) {
  std::vector<std::string> sets = {"grpo.iterations=120"};
  if (const char* extra = std::getenv("MOERL_POLICY_TEST_SET")) sets.push_back(extra);
  auto cfg = config::load("", sets);
  ASSERT_TRUE(cfg.ok()) << cfg.err().to_string();
  auto t = make_task(*cfg);
  ASSERT_TRUE(t.ok());
  auto rm = make_reward(*cfg, **t);
  ASSERT_TRUE(rm.ok());
  auto mc = model_config::from_config(*cfg);
  ASSERT_TRUE(mc.ok());
  auto tc = train_config::from_config(*cfg);
  ASSERT_TRUE(tc.ok());
  auto ex = make_local_expert_exchange();
  auto pol = moe_policy::create(*mc, *ex);
  ASSERT_TRUE(pol.ok());
  auto curve = train_single_process(**pol, **t, **rm, *tc, [](const iteration_stats& s) {
    if (s.iteration % 10 == 0)
      std::printf("iteration %3d mean_reward %.3f exact %.2f clip %.3f imbalance %.2f\n",
                  s.iteration, s.mean_reward, s.exact_fraction, s.update.grpo.clip_fraction,
                  s.update.load_imbalance);
    return true;
  });
  ASSERT_TRUE(curve.ok()) << curve.err().to_string();
  const double random = (*t)->reward_random();
  double first = 0, last = 0;
  const size_t n = curve->size(), w = 10;
  for (size_t i = 0; i < w; ++i) {
    first += (*curve)[i].mean_reward / w;
    last += (*curve)[n - w + i].mean_reward / w;
  }
  std::printf("reward_random %.3f, first %zu iterations %.3f, last %zu iterations %.3f\n", random,
              w, first, w, last);
  EXPECT_NEAR(first, random, 0.1) << "an untrained policy should score near random";
  EXPECT_GT(last, random + 0.25) << "GRPO did not lift the reward";
}

}  // namespace
}  // namespace moerl::policy
