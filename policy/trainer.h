// The policy iteration's learning steps as library calls the runtime's actors make:
// rollout (a rollout rank), score (a reward actor), grpo_gradient + adam (a trainer rank,
// with a dense all-reduce of `grads` in between when there are several), and a
// single-process loop that chains them (tests, and the baseline the distributed run is
// compared against).
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "policy/adam.h"
#include "policy/grpo.h"
#include "policy/model.h"
#include "policy/reward.h"
#include "policy/task.h"

namespace moerl::policy {

// num_prompts prompts, group_size completions each (group ids first_group, first_group+1,
// ...), sampled from `policy` at `temperature`, stamped with policy_version. Rewards unset.
result<std::vector<sample>> rollout(moe_policy& policy, const task& t, int num_prompts,
                                    int group_size, float temperature, std::mt19937_64& rng,
                                    uint64_t policy_version, int64_t first_group);

// Fills sample.reward for each sample.
status score_samples(const reward_model& rm, std::vector<sample>* samples);

struct update_stats {
  grpo_loss_stats grpo;
  double aux_loss = 0;        // load-balance loss summed over layers
  double load_imbalance = 0;  // max/mean expert load, mean over layers
};

// Gradient of the GRPO loss (+ the MoE aux loss) over `samples` into *grads (zeroed first,
// sized to the policy's layout). `advantages` from group_advantages(samples). `ref` is the
// frozen reference policy when cfg.kl_coef > 0 (else may be null).
result<update_stats> grpo_gradient(moe_policy& policy, const std::vector<sample>& samples,
                                   const std::vector<double>& advantages, const grpo_config& cfg,
                                   float temperature, moe_policy* ref, std::vector<float>* grads);

// Per-token logprobs of each sample's completion under `policy` (no gradient).
result<std::vector<std::vector<float>>> completion_logprobs(moe_policy& policy,
                                                            const std::vector<sample>& samples,
                                                            float temperature);

struct train_config {
  int iterations = 100;
  int prompts_per_iteration = 16;
  float temperature = 1.0f;
  uint64_t seed = 1;  // prompts and sampling
  grpo_config grpo;
  adam_config adam;
  // From keys grpo.iterations, grpo.prompts_per_iteration, grpo.seed, policy.temperature
  // and the grpo_config / adam_config keys.
  static result<train_config> from_config(const config& cfg);
};

struct iteration_stats {
  int iteration = 0;
  double mean_reward = 0;     // over the iteration's samples, before its update
  double exact_fraction = 0;  // samples the task verifier scores reward_max
  // The task verifier's mean score of the same samples: equals mean_reward under the
  // verifier reward; under a learned reward model it shows what the policy really learned.
  double mean_task_score = 0;
  update_stats update;  // of the last epoch
  double grad_norm = 0;
  double t_generate = 0, t_reward = 0, t_train = 0;  // seconds
};

// GRPO on one process with the local expert exchange. on_iteration (may be empty) sees
// each iteration's stats; returning false stops the run early.
result<std::vector<iteration_stats>> train_single_process(
    moe_policy& policy, const task& t, const reward_model& rm, const train_config& cfg,
    const std::function<bool(const iteration_stats&)>& on_iteration);

}  // namespace moerl::policy
