#include "policy/grpo.h"

#include <cmath>
#include <map>

namespace moerl::policy {

result<grpo_config> grpo_config::from_config(const config& c) {
  grpo_config g;
  g.group_size = static_cast<int>(c.get_int("grpo.group_size"));
  g.clip_eps = c.get_double("grpo.clip_eps");
  g.kl_coef = c.get_double("grpo.kl_coef");
  g.epochs = static_cast<int>(c.get_int("grpo.epochs"));
  if (g.group_size < 2 || g.group_size > 4096)
    return error{errc::invalid_config,
                 "key 'grpo.group_size': must be in 2..4096 (a group of one has no baseline)"};
  if (!(g.clip_eps > 0 && g.clip_eps < 1))
    return error{errc::invalid_config, "key 'grpo.clip_eps': must be in (0, 1)"};
  if (!(g.kl_coef >= 0)) return error{errc::invalid_config, "key 'grpo.kl_coef': must be >= 0"};
  if (g.epochs < 1 || g.epochs > 64)
    return error{errc::invalid_config, "key 'grpo.epochs': must be in 1..64"};
  return g;
}

std::vector<double> group_advantages(const std::vector<sample>& samples) {
  std::map<int64_t, std::pair<double, double>> moments;  // group -> (sum, sum of squares)
  std::map<int64_t, int> counts;
  for (const auto& s : samples) {
    moments[s.group].first += s.reward;
    moments[s.group].second += s.reward * s.reward;
    counts[s.group] += 1;
  }
  std::vector<double> adv(samples.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    const auto& m = moments[samples[i].group];
    const double n = counts[samples[i].group];
    const double mean = m.first / n;
    const double var = std::max(0.0, m.second / n - mean * mean);
    const double sd = std::sqrt(var);
    adv[i] = sd < 1e-9 ? 0.0 : (samples[i].reward - mean) / (sd + 1e-6);
  }
  return adv;
}

grpo_loss_stats grpo_loss(const std::vector<grpo_token_inputs>& batch, const grpo_config& cfg,
                          std::vector<std::vector<float>>* dlogprobs) {
  grpo_loss_stats st;
  dlogprobs->assign(batch.size(), {});
  if (batch.empty()) return st;
  const double inv_n = 1.0 / double(batch.size());
  double ratio_sum = 0, kl_sum = 0;
  int64_t clipped = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const auto& s = batch[i];
    auto& d = (*dlogprobs)[i];
    d.assign(s.len, 0.0f);
    int num_policy_tokens = 0;
    for (int j = 0; j < s.len; ++j) num_policy_tokens += !(s.from_env && s.from_env[j]);
    if (num_policy_tokens == 0) continue;
    // Token mean inside the sample (over the tokens the policy sampled), mean over samples.
    const double w = inv_n / num_policy_tokens;
    for (int j = 0; j < s.len; ++j) {
      if (s.from_env && s.from_env[j]) continue;  // an environment reply: d stays 0
      const double ratio = std::exp(double(s.logprobs[j]) - s.behaviour_logprobs[j]);
      const double lo = 1.0 - cfg.clip_eps, hi = 1.0 + cfg.clip_eps;
      const double clipped_ratio = std::min(std::max(ratio, lo), hi);
      const double a = s.advantage;
      const double unclipped_obj = ratio * a, clipped_obj = clipped_ratio * a;
      double obj, dobj;
      if (unclipped_obj <= clipped_obj) {
        obj = unclipped_obj;
        dobj = ratio * a;  // d(ratio)/d(lp) = ratio
      } else {
        obj = clipped_obj;
        const bool is_clipped = ratio < lo || ratio > hi;
        dobj = is_clipped ? 0.0 : ratio * a;
        clipped += is_clipped;
      }
      double kl = 0, dkl = 0;
      if (cfg.kl_coef > 0 && s.ref_logprobs) {
        const double diff = double(s.ref_logprobs[j]) - s.logprobs[j];
        kl = std::exp(diff) - diff - 1.0;
        dkl = 1.0 - std::exp(diff);
      }
      st.loss += -w * (obj - cfg.kl_coef * kl);
      d[j] = float(-w * (dobj - cfg.kl_coef * dkl));
      ratio_sum += ratio;
      kl_sum += kl;
      ++st.num_tokens;
    }
  }
  if (st.num_tokens > 0) {
    st.mean_ratio = ratio_sum / st.num_tokens;
    st.clip_fraction = double(clipped) / st.num_tokens;
    st.kl = kl_sum / st.num_tokens;
  }
  return st;
}

}  // namespace moerl::policy
