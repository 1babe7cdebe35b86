// What the expert-parallel job tests share: a small policy shape and a node config whose
// fabric is shm (required, so a missing provider fails loudly instead of falling back).
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "common/config.h"
#include "policy/model.h"
#include "policy/reward.h"
#include "policy/task.h"
#include "policy/trainer.h"
#include "tests/support/tiny_model.h"

namespace moerl::job::testing {

inline policy::model_config small_model(uint64_t seed) {
  return ::moerl::testing::tiny_model(seed);
}

// About 64 MiB of parameters, nearly all of it experts (so each member's share of a trainer
// group is about 64 MiB / members): the issue-27 tests' model.
inline policy::model_config model_of_64_mib() {
  auto c = small_model(27);
  c.aux_loss_coef = 0.0f;
  c.num_experts = 8;
  c.d_model = 32;
  c.ffn_dim = 10240;
  return c;
}

inline config node_config() {
  auto cfg = config::load(
      "", {"fabric.provider=shm", "fabric.require_provider=true", "fabric.op_timeout_ms=20000"});
  EXPECT_TRUE(cfg.ok()) << cfg.err().to_string();
  return *cfg;
}

// Moves a policy off its start as training would: N(0, 0.3) noise on every parameter.
inline void perturb(policy::moe_policy& pol, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.3f);
  for (auto& x : pol.params()) x += nd(rng);
}

// One GRPO batch: 4 groups of 4 rollouts of the sort task by `model`'s initial policy,
// scored by the verifier, with their group advantages.
struct training_batch {
  std::vector<policy::sample> samples;
  std::vector<double> advantages;
};

inline training_batch make_training_batch(const policy::model_config& model, uint64_t seed) {
  auto local = policy::make_local_expert_exchange();
  auto pol = policy::moe_policy::create(model, *local);
  EXPECT_TRUE(pol.ok());
  auto task = policy::make_sort_task(3);
  auto rm = policy::make_verifier_reward(*task);
  std::mt19937_64 rng(seed);
  auto s = policy::rollout(**pol, *task, 4, 4, 1.0f, rng, 0, 0);
  EXPECT_TRUE(s.ok());
  EXPECT_TRUE(policy::score_samples(*rm, &*s).ok());
  training_batch b;
  b.samples = std::move(*s);
  b.advantages = policy::group_advantages(b.samples);
  return b;
}

}  // namespace moerl::job::testing
