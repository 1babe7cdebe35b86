// The expert-parallel trainer step: the batch split over 2 rank threads (each with half the
// experts, exchanging over fabric shm), dense gradients all-reduced, expert gradients local,
// Adam per rank, gives the same new full parameter set, gradient norm and Adam moments as
// the single-rank GRPO step on the same batch — with an uneven split, with global-norm
// clipping active, and over two steps (Adam's moments carry over). Bad batches are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "common/config.h"
#include "job/ep_trainer.h"
#include "policy/reward.h"
#include "policy/task.h"
#include "policy/trainer.h"
#include "tests/job/ep_fixture.h"

namespace moerl::job {
namespace {

policy::model_config small_model() {
  auto c = testing::small_model(13);
  // The load-balance loss is computed per rank's tokens in EP (ep_trainer.h); off here so
  // the comparison is exact up to fp32 rounding.
  c.aux_loss_coef = 0.0f;
  return c;
}
using testing::node_config;

policy::adam_config adam_cfg() {
  policy::adam_config a;
  a.learning_rate = 1e-2;
  // A large eps keeps the update a smooth function of the gradient (with a tiny eps, Adam's
  // first step is lr * sign(g) and fp32 noise in a near-zero gradient flips whole steps).
  a.eps = 1e-3;
  a.grad_clip = 0.05;  // small enough that the step clips by the global norm
  return a;
}

struct batch {
  std::vector<policy::sample> samples;
  std::vector<double> advantages;
};

// Samples from a policy moved off its start, scored by the sort task's verifier.
batch make_batch(policy::moe_policy& pol, int prompts, int group, uint64_t seed, size_t drop_last) {
  auto task = policy::make_sort_task(3);
  auto rm = policy::make_verifier_reward(*task);
  std::mt19937_64 rng(seed);
  auto s = policy::rollout(pol, *task, prompts, group, 1.0f, rng, 0, 0);
  EXPECT_TRUE(s.ok()) << s.err().to_string();
  EXPECT_TRUE(policy::score_samples(*rm, &*s).ok());
  s->resize(s->size() - drop_last);
  batch b;
  b.samples = std::move(*s);
  b.advantages = policy::group_advantages(b.samples);
  return b;
}

std::vector<float> moments_of(const std::string& adam_bytes) {
  std::vector<float> v((adam_bytes.size() - 24) / 4);
  std::memcpy(v.data(), adam_bytes.data() + 24, v.size() * 4);
  return v;
}

TEST(ep_trainer, a_step_on_two_ranks_gives_the_single_rank_parameters) {
  const policy::model_config model = small_model();
  policy::grpo_config grpo;
  grpo.group_size = 4;
  auto local = policy::make_local_expert_exchange();
  auto single = policy::moe_policy::create(model, *local);
  ASSERT_TRUE(single.ok());
  testing::perturb(**single, 4);

  auto ep = ep_trainer::create(node_config(), model, grpo, adam_cfg(), 1.0f, 2, 32);
  ASSERT_TRUE(ep.ok()) << ep.err().to_string();
  ASSERT_TRUE((*ep)->load((*single)->serialize()).ok());
  policy::adam opt(adam_cfg(), (*single)->layout().num_floats());

  double max_change = 0, max_diff = 0;
  for (int step = 0; step < 2; ++step) {
    // 4 prompts x 4 samples, one dropped: 8 + 7 samples over the two ranks.
    auto b = make_batch(**single, 4, 4, 100 + step, 1);
    const std::vector<float> before = (*single)->params();
    std::vector<float> grads;
    auto u = policy::grpo_gradient(**single, b.samples, b.advantages, grpo, 1.0f, nullptr, &grads);
    ASSERT_TRUE(u.ok()) << u.err().to_string();
    auto norm = opt.step((*single)->params(), grads);
    ASSERT_TRUE(norm.ok());
    ASSERT_GT(*norm, adam_cfg().grad_clip) << "the test means to exercise clipping";

    auto r = (*ep)->step(b.samples, b.advantages);
    ASSERT_TRUE(r.ok()) << r.err().to_string();
    EXPECT_NEAR(r->grad_norm, *norm, 1e-4 * *norm) << "step " << step;
    EXPECT_NEAR(r->update.grpo.clip_fraction, u->grpo.clip_fraction, 1e-9);

    auto bytes = (*ep)->serialize();
    ASSERT_TRUE(bytes.ok()) << bytes.err().to_string();
    policy::param_layout layout;
    auto got = policy::deserialize_params(*bytes, &(*single)->layout(), &layout);
    ASSERT_TRUE(got.ok()) << got.err().to_string();
    const auto& want = (*single)->params();
    ASSERT_EQ(got->size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      max_change = std::max(max_change, double(std::fabs(want[i] - before[i])));
      max_diff = std::max(max_diff, double(std::fabs((*got)[i] - want[i])));
      ASSERT_NEAR((*got)[i], want[i], 2e-5) << "step " << step << " param " << i;
    }
  }
  EXPECT_GT(max_change, 2e-3);  // the steps moved the weights by a fair part of the learning rate
  std::printf("max parameter change %.3g, max EP vs single-rank difference %.3g\n", max_change,
              max_diff);
  EXPECT_LT(max_diff, max_change * 1e-2);

  // The assembled Adam state equals the single-rank optimiser's.
  auto a = (*ep)->serialize_adam();
  ASSERT_TRUE(a.ok()) << a.err().to_string();
  const std::string want_adam = opt.serialize();
  ASSERT_EQ(a->size(), want_adam.size());
  EXPECT_EQ(a->substr(0, 24), want_adam.substr(0, 24));  // header and step count
  const auto gm = moments_of(*a), wm = moments_of(want_adam);
  for (size_t i = 0; i < wm.size(); ++i)
    ASSERT_NEAR(gm[i], wm[i], 1e-4 + 1e-3 * std::fabs(wm[i])) << i;
  // And loads back (a resumed trainer).
  EXPECT_TRUE((*ep)->load_adam(*a).ok());
}

TEST(ep_trainer,
     a_group_broken_by_a_dead_rank_is_rebuilt_and_the_step_still_equals_the_single_rank_one) {
  const policy::model_config model = small_model();
  policy::grpo_config grpo;
  grpo.group_size = 4;
  auto local = policy::make_local_expert_exchange();
  auto single = policy::moe_policy::create(model, *local);
  ASSERT_TRUE(single.ok());
  auto cfg = config::load(
      "", {"fabric.provider=shm", "fabric.require_provider=true", "fabric.op_timeout_ms=1000"});
  ASSERT_TRUE(cfg.ok());
  auto ep = ep_trainer::create(*cfg, model, grpo, adam_cfg(), 1.0f, 2, 16);
  ASSERT_TRUE(ep.ok()) << ep.err().to_string();
  ASSERT_TRUE((*ep)->load((*single)->serialize()).ok());
  policy::adam opt(adam_cfg(), (*single)->layout().num_floats());
  for (int step = 0; step < 2; ++step) {
    if (step == 1) {
      auto broke = (*ep)->break_group_for_test();
      ASSERT_FALSE(broke.ok());
      EXPECT_NE(broke.err().message.find("rank"), std::string::npos) << broke.err().message;
    }
    auto b = make_batch(**single, 2, 4, 200 + step, 0);
    std::vector<float> grads;
    ASSERT_TRUE(
        policy::grpo_gradient(**single, b.samples, b.advantages, grpo, 1.0f, nullptr, &grads).ok());
    ASSERT_TRUE(opt.step((*single)->params(), grads).ok());
    auto r = (*ep)->step(b.samples, b.advantages);
    ASSERT_TRUE(r.ok()) << "step " << step << ": " << r.err().to_string();
  }
  auto bytes = (*ep)->serialize();
  ASSERT_TRUE(bytes.ok());
  auto got = policy::deserialize_params(*bytes, &(*single)->layout());
  ASSERT_TRUE(got.ok());
  for (size_t i = 0; i < got->size(); ++i)
    ASSERT_NEAR((*got)[i], (*single)->params()[i], 2e-5) << i;
}

TEST(ep_trainer, bad_batches_and_configs_are_refused_by_name) {
  const policy::model_config model = small_model();
  policy::grpo_config grpo;
  grpo.group_size = 2;
  auto ep = ep_trainer::create(node_config(), model, grpo, adam_cfg(), 1.0f, 2, 4);
  ASSERT_TRUE(ep.ok()) << ep.err().to_string();
  auto local = policy::make_local_expert_exchange();
  auto pol = policy::moe_policy::create(model, *local);
  ASSERT_TRUE(pol.ok());
  auto one = make_batch(**pol, 1, 2, 7, 1);  // one sample: a rank would have none
  auto r = (*ep)->step(one.samples, one.advantages);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.err().message.find("cannot keep 2"), std::string::npos) << r.err().message;
  auto big = make_batch(**pol, 8, 2, 8, 0);  // 16 samples, over the bound of 4
  r = (*ep)->step(big.samples, big.advantages);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.err().message.find("over its bound"), std::string::npos) << r.err().message;
  EXPECT_FALSE((*ep)->load_adam("MOERLADMshort").ok());
  auto odd = make_batch(**pol, 1, 2, 10, 0);
  odd.samples[1].completion[0] = 9999;  // only the second rank would see it
  r = (*ep)->step(odd.samples, odd.advantages);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.err().message.find("token id 9999"), std::string::npos) << r.err().message;
  // The refusals reached no rank: a legal step still works.
  auto ok = make_batch(**pol, 1, 2, 9, 0);
  r = (*ep)->step(ok.samples, ok.advantages);
  EXPECT_TRUE(r.ok()) << r.err().to_string();

  grpo.kl_coef = 0.1;
  auto kl = ep_trainer::create(node_config(), model, grpo, adam_cfg(), 1.0f, 2, 4);
  ASSERT_FALSE(kl.ok());
  EXPECT_EQ(kl.err().code, errc::invalid_config);
}

}  // namespace
}  // namespace moerl::job
