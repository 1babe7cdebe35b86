// What the modpow test job's trainer ranks do with their share of a batch: verify every
// sample against the test work's checker (the prompt belongs to its group,
// the tokens and log-probabilities are exactly what that prompt, index and policy version
// generate, the reward is what the verifier gives) and compute group-relative advantages
// (reward minus the group mean, divided by the group's standard deviation).
#pragma once

#if !defined(MOERL_INSIDE_moerl_job_modpow)
#error \
    "job/internal/trainer_check.h is private to moerl_job_modpow (job/): include its public headers"
#endif

#include <cstdint>
#include <vector>

#include "messages/sample.h"

namespace moerl::job {

struct check_totals {
  uint64_t verified = 0;  // samples that passed every check
  uint64_t bad = 0;       // samples that failed one (a bug or corruption upstream)
  uint64_t groups = 0;
  double sum_abs_advantage = 0;
};

check_totals check_and_score(const std::vector<messages::sample>& samples, uint32_t rounds);

}  // namespace moerl::job
