// Inputs of the policy byte-format fixtures under tests/policy/data/ (parameter bytes,
// Adam state, learned reward model checkpoint). They were written by the code before the
// formats moved to common/byte_codec.h; policy_format_fixture_test reads them with today's
// code and checks that writing the same inputs again gives the same bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "policy/adam.h"
#include "policy/params.h"

namespace moerl::policy::fixture {

// Two tensors with values that are not round in binary (1/3) and have a sign bit.
inline param_layout params_layout() {
  param_layout l;
  l.add("layer0.w", {2, 3});
  l.add("layer0.b", {3});
  return l;
}
inline std::vector<float> params_values() {
  std::vector<float> v;
  for (int i = 0; i < 9; ++i) v.push_back(float(i - 4) / 3.0f);
  return v;
}

// Adam over 4 parameters after two steps on these gradients (default config).
constexpr int kAdamSteps = 2;
inline adam make_stepped_adam() {
  adam opt(adam_config{}, 4);
  std::vector<float> params = {1.0f, -2.0f, 0.5f, 3.0f};
  const std::vector<float> grads[kAdamSteps] = {{0.5f, -1.0f, 2.0f, 0.0f},
                                                {-0.25f, 0.75f, 1.5f, -3.0f}};
  for (const auto& g : grads) (void)opt.step(params, g);
  return opt;
}

// The learned reward model: sort task with 2 digits, 2 hidden units, this seed.
constexpr int kRewardDigits = 2;
constexpr int kRewardHidden = 2;
constexpr uint64_t kRewardSeed = 11;
// The prompt and completion whose score the fixture test checks.
inline const char* reward_prompt() { return "^s31="; }
inline const char* reward_completion() { return "13$"; }

}  // namespace moerl::policy::fixture
