// Multi-turn episodes for the GRPO job: the policy answers each turn, the environment on an
// env node replies (env/ENV.md), and the trajectory becomes one sample whose reward is
// the environment's. The environment's reply tokens stay in the sample (the policy
// conditions on them) flagged from_env, so the trainer takes no loss on them.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "actors/rollout_work.h"
#include "common/error.h"
#include "env/env_api.h"
#include "job/prompt_dataset.h"
#include "policy/model.h"

namespace moerl::job {

// A group's episodes: rows[i] is episode i as a sample (prompt, trajectory, logprobs with 0
// on environment tokens, reward, timing).
struct episode_group {
  std::vector<actors::generated_sample> rows;
};

struct episode_options {
  std::string task;           // the env nodes' name for it ("guess")
  uint64_t episode_seed = 0;  // the same for every episode of a group: one hidden state
  int group_size = 8;         // G episodes
  int max_turns = 9;          // a bound on turns even if an environment never ends one
  float temperature = 1.0f;
};

// Runs G episodes in lockstep: one batched generate per turn for every episode still going,
// then one step each, sent together. An episode the environment plane fails (node dead or
// silent, environment restarted, action refused) fails the group: the unit goes back to the
// queue under a new attempt.
result<episode_group> run_episodes(policy::moe_policy& policy, env::env_link& env,
                                   const episode_options& o, std::mt19937_64& rng);

// The environment an env node hosts for task "guess" (policy/tasks/guess.h). With a dataset
// the hidden number is the row of the episode seed's (job/prompt_dataset.h), else the seed's.
std::unique_ptr<env::environment> make_guess_environment(
    int num_turns, std::shared_ptr<const prompt_dataset> dataset = nullptr);

}  // namespace moerl::job
