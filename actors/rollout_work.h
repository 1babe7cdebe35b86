// What a rollout actor does with a leased work unit, kept generic so a job (the GRPO job on
// the MoE policy in job/, or the modpow test job) plugs in its work without touching leasing,
// fencing or the sample plane.
//
// A work unit holds a few prompt groups; for each prompt the work generates `group_size`
// responses (GRPO needs the whole group to compute group-relative advantages). A reward
// function scores each response; a checker lets a consumer (trainer, tests) verify that a
// sample really is what generating that prompt under that policy version yields.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "env/env_api.h"

namespace moerl::actors {

struct generated_sample {
  uint32_t group = 0;            // index of the prompt group inside the unit
  uint32_t index_in_group = 0;   // 0 .. group_size-1
  std::vector<uint32_t> prompt;  // prompt tokens
  std::vector<uint32_t> tokens;  // generated tokens
  std::vector<float> logprobs;   // one per generated token
  // Multi-turn episodes (the work ran them on env nodes through an env_link): the reward
  // the environment gave, 1 per token of `tokens` that is an environment reply, and the
  // time and steps spent on the environment. Single-turn: rewarded false, the rest empty.
  bool rewarded = false;
  float reward = 0;
  std::vector<uint8_t> from_env;
  uint32_t env_us = 0;
  uint32_t env_steps = 0;
};

// One prompt group of a leased unit, as rollout_work::prepare sees it.
struct prompt_group {
  uint64_t group_id = 0;
  std::vector<uint32_t> prompt;
};

class rollout_work {
 public:
  virtual ~rollout_work() = default;
  virtual std::string name() const = 0;
  // Deterministic in (prompt, index_in_group, policy_version) for the test work; the real
  // policy samples, but still returns one generated_sample per (group, index).
  virtual result<generated_sample> generate(const std::vector<uint32_t>& prompt, uint32_t group,
                                            uint32_t index_in_group, uint64_t policy_version) = 0;
  // Called with every prompt group of the units a worker just leased (one lease batch, one
  // policy version) before any of their samples is asked for: work that generates several
  // groups at once does it here, and generate() then hands out their rows. Optional: an
  // error is logged and generate() works group by group as without it.
  virtual status prepare(const std::vector<prompt_group>& groups, uint64_t policy_version) {
    (void)groups;
    (void)policy_version;
    return {};
  }
  // The environment plane, for work whose episodes are multi-turn; the rollout worker owns
  // the link and it outlives the work. Single-turn work ignores it.
  virtual void use_environments(env::env_link* link) { (void)link; }
  // Called before a prompt group's samples with its group id (multi-turn work seeds the
  // group's episodes from it, so every attempt of a unit replays the same episodes' state).
  virtual void begin_group(uint64_t group_id) { (void)group_id; }
  // A rollout group's leader (job.h make_group_rollout_work): the earliest drain deadline
  // among the group's members as the work last heard it (unix ms; 0: none drains). The
  // worker drains the whole group by it, as if its own node drained.
  virtual int64_t group_drain_by_unix_ms() const { return 0; }
  // The worker has no unit in hand: a group's leader asks its members how they are (so a
  // member's drain is heard while the group idles). An error: the group broke.
  virtual status idle() { return {}; }
  // False once the group this work runs on broke: the worker stops and re-joins.
  virtual bool usable() const { return true; }
};

class reward_function {
 public:
  virtual ~reward_function() = default;
  // Scores one response; an error means the sample is malformed (dropped with a reason).
  virtual result<float> score(const std::vector<uint32_t>& prompt,
                              const std::vector<uint32_t>& tokens) const = 0;
};

}  // namespace moerl::actors
