#include "policy/trainer.h"

#include <algorithm>
#include <cmath>

#include "common/status_try.h"
#include "policy/dense_ops.h"
#include "policy/internal/grpo_step.h"

namespace moerl::policy {

namespace detail {

result<packed_batch> pack(const std::vector<sample>& samples) {
  packed_batch pb;
  pb.b = samples.size();
  size_t p = samples[0].prompt.size(), c = 0;
  for (const auto& s : samples) {
    if (s.prompt.size() != p)
      return error{errc::invalid_argument, "training batch: prompts differ in length"};
    if (s.completion.empty() || s.behaviour_logprobs.size() != s.completion.size())
      return error{errc::invalid_argument,
                   "training batch: a sample has no completion or a logprob count that differs "
                   "from its token count"};
    if (!s.from_env.empty() && s.from_env.size() != s.completion.size())
      return error{errc::invalid_argument,
                   "training batch: a sample's from_env flags differ in count from its tokens"};
    c = std::max(c, s.completion.size());
  }
  pb.t = p + c;
  pb.tokens.assign(pb.b * pb.t, tok_pad);
  pb.mask.assign(pb.b * pb.t, 0);
  for (int64_t i = 0; i < pb.b; ++i) {
    std::fill_n(pb.mask.begin() + i * pb.t, p + samples[i].completion.size(), 1);
    std::copy(samples[i].prompt.begin(), samples[i].prompt.end(), pb.tokens.begin() + i * pb.t);
    std::copy(samples[i].completion.begin(), samples[i].completion.end(),
              pb.tokens.begin() + i * pb.t + p);
  }
  return pb;
}

// logprob of each completion token from the logits rows that predict it.
std::vector<std::vector<float>> gather_logprobs(const std::vector<sample>& samples,
                                                const packed_batch& pb,
                                                const std::vector<float>& logits,
                                                float temperature) {
  std::vector<std::vector<float>> out(samples.size());
  std::vector<float> lp(num_vocab);
  const int64_t p = samples[0].prompt.size();
  for (size_t i = 0; i < samples.size(); ++i)
    for (size_t j = 0; j < samples[i].completion.size(); ++j) {
      log_softmax_row(&logits[(i * pb.t + p - 1 + j) * num_vocab], num_vocab, temperature,
                      lp.data());
      out[i].push_back(lp[samples[i].completion[j]]);
    }
  return out;
}

std::vector<float> logits_gradient(const std::vector<sample>& samples, const packed_batch& pb,
                                   const std::vector<float>& logits,
                                   const std::vector<std::vector<float>>& dlogp,
                                   float temperature) {
  // d logp(tok) / d logit_v = (1[v == tok] - softmax_v) / temperature
  std::vector<float> dlogits(logits.size(), 0.0f), lp(num_vocab);
  const int64_t p = samples[0].prompt.size();
  for (size_t i = 0; i < samples.size(); ++i)
    for (size_t j = 0; j < samples[i].completion.size(); ++j) {
      const int64_t row = i * pb.t + p - 1 + j;
      log_softmax_row(&logits[row * num_vocab], num_vocab, temperature, lp.data());
      const float g = dlogp[i][j] / temperature;
      for (int v = 0; v < num_vocab; ++v)
        dlogits[row * num_vocab + v] =
            g * ((v == samples[i].completion[j] ? 1.0f : 0.0f) - std::exp(lp[v]));
    }
  return dlogits;
}

}  // namespace detail

result<std::vector<sample>> rollout(moe_policy& policy, const task& t, int num_prompts,
                                    int group_size, float temperature, std::mt19937_64& rng,
                                    uint64_t policy_version, int64_t first_group) {
  return detail::rollout_t(policy, t, num_prompts, group_size, temperature, rng, policy_version,
                           first_group);
}

status score_samples(const reward_model& rm, std::vector<sample>* samples) {
  for (auto& s : *samples) {
    ASSIGN_OR_RETURN(auto r, rm.score(s.prompt, s.completion));
    s.reward = r;
  }
  return ok_status();
}

result<std::vector<std::vector<float>>> completion_logprobs(moe_policy& policy,
                                                            const std::vector<sample>& samples,
                                                            float temperature) {
  return detail::completion_logprobs_t(policy, samples, temperature);
}

result<update_stats> grpo_gradient(moe_policy& policy, const std::vector<sample>& samples,
                                   const std::vector<double>& advantages, const grpo_config& cfg,
                                   float temperature, moe_policy* ref, std::vector<float>* grads) {
  return detail::grpo_gradient_t(policy, samples, advantages, cfg, temperature, ref, grads);
}

result<train_config> train_config::from_config(const config& c) {
  train_config t;
  t.iterations = static_cast<int>(c.get_int("grpo.iterations"));
  t.prompts_per_iteration = static_cast<int>(c.get_int("grpo.prompts_per_iteration"));
  t.seed = static_cast<uint64_t>(c.get_int("grpo.seed"));
  t.temperature = static_cast<float>(c.get_double("policy.temperature"));
  if (t.iterations < 0) return error{errc::invalid_config, "key 'grpo.iterations': must be >= 0"};
  if (t.prompts_per_iteration < 1)
    return error{errc::invalid_config, "key 'grpo.prompts_per_iteration': must be >= 1"};
  if (!(t.temperature > 0))
    return error{errc::invalid_config, "key 'policy.temperature': must be > 0"};
  ASSIGN_OR_RETURN(auto g, grpo_config::from_config(c));
  t.grpo = g;
  ASSIGN_OR_RETURN(auto a, adam_config::from_config(c));
  t.adam = a;
  return t;
}

result<std::vector<iteration_stats>> train_single_process(
    moe_policy& policy, const task& t, const reward_model& rm, const train_config& cfg,
    const std::function<bool(const iteration_stats&)>& on_iteration) {
  return detail::train_single_process_t(policy, t, rm, cfg, on_iteration);
}

}  // namespace moerl::policy
