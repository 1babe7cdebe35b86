// The deterministic, verifiable work used by tests, `moerl up` and the benchmarks until the
// real policy lands: iterated modular exponentiation. It does real arithmetic whose every
// output token a checker can recompute, so a misrouted, duplicated or corrupted sample is
// detected, and it never sleeps.
//
// Prompt: {seed, exponent, modulus, rounds}. Response token r is x_r = x_{r-1}^exponent mod
// modulus (x_0 = seed), computed by left-to-right square-and-multiply. Like a policy that is
// sometimes wrong, response (index_in_group, policy_version) makes a deterministic slip in
// one round for about one response in three, so rewards differ inside a group.
// The reward recomputes the chain with right-to-left exponentiation (a second method) and
// gives 1 for a correct final token, 0 otherwise.
#pragma once

#include "actors/rollout_work.h"

namespace moerl::job {

// Prompt of unit `unit`, group `group`: fixed by those two numbers, so the coordinator only
// needs to hand out unit ids. `rounds` sets the cost (and the response length).
std::vector<uint32_t> modpow_prompt(uint64_t unit, uint32_t group, uint32_t rounds);

class modpow_work final : public actors::rollout_work {
 public:
  std::string name() const override { return "modpow"; }
  result<actors::generated_sample> generate(const std::vector<uint32_t>& prompt, uint32_t group,
                                            uint32_t index_in_group,
                                            uint64_t policy_version) override;
};

class modpow_reward final : public actors::reward_function {
 public:
  result<float> score(const std::vector<uint32_t>& prompt,
                      const std::vector<uint32_t>& tokens) const override;
};

// True when `s` is exactly what modpow_work generates for its prompt, index and version.
bool modpow_check(const actors::generated_sample& s, uint64_t policy_version);

}  // namespace moerl::job
