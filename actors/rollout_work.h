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

namespace moerl::actors {

struct generated_sample {
  uint32_t group = 0;            // index of the prompt group inside the unit
  uint32_t index_in_group = 0;   // 0 .. group_size-1
  std::vector<uint32_t> prompt;  // prompt tokens
  std::vector<uint32_t> tokens;  // generated tokens
  std::vector<float> logprobs;   // one per generated token
};

class rollout_work {
 public:
  virtual ~rollout_work() = default;
  virtual std::string name() const = 0;
  // Deterministic in (prompt, index_in_group, policy_version) for the test work; the real
  // policy samples, but still returns one generated_sample per (group, index).
  virtual result<generated_sample> generate(const std::vector<uint32_t>& prompt, uint32_t group,
                                            uint32_t index_in_group, uint64_t policy_version) = 0;
};

class reward_function {
 public:
  virtual ~reward_function() = default;
  // Scores one response; an error means the sample is malformed (dropped with a reason).
  virtual result<float> score(const std::vector<uint32_t>& prompt,
                              const std::vector<uint32_t>& tokens) const = 0;
};

}  // namespace moerl::actors
