#include "job/internal/trainer_check.h"

#include <cmath>
#include <map>

#include "job/modpow_work.h"

namespace moerl::job {

check_totals check_and_score(const std::vector<messages::sample>& samples, uint32_t rounds) {
  check_totals t;
  modpow_reward verifier;
  std::map<uint64_t, std::vector<float>> rewards;
  for (const auto& s : samples) {
    actors::generated_sample g;
    g.index_in_group = s.index_in_group;
    g.prompt = s.prompt_tokens;
    g.tokens = s.tokens;
    g.logprobs = s.logprobs;
    bool ok = s.rewarded && s.prompt_tokens == modpow_prompt(s.group_id, 0, rounds) &&
              modpow_check(g, s.policy_version);
    if (ok) {
      auto r = verifier.score(s.prompt_tokens, s.tokens);
      ok = r && *r == s.reward;
    }
    (ok ? t.verified : t.bad)++;
    rewards[s.group_id].push_back(s.reward);
  }
  for (auto& [group, rs] : rewards) {
    double mean = 0, var = 0;
    for (float r : rs) mean += r;
    mean /= rs.size();
    for (float r : rs) var += (r - mean) * (r - mean);
    double sd = std::sqrt(var / rs.size());
    for (float r : rs) t.sum_abs_advantage += std::fabs((r - mean) / (sd + 1e-6));
    ++t.groups;
  }
  return t;
}

}  // namespace moerl::job
