#include "policy/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/status_try.h"
#include "kernels/load_stats.h"
#include "policy/dense_ops.h"

namespace moerl::policy {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Prompt + completion, padded with tok_pad to a common length; completion token j of
// sample i is predicted by logits row i*t + prompt_len - 1 + j.
struct packed_batch {
  std::vector<token_id> tokens;
  std::vector<uint8_t> mask;  // 1 on prompt and completion positions, 0 on padding
  int64_t b = 0, t = 0;
};

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

}  // namespace

result<std::vector<sample>> rollout(moe_policy& policy, const task& t, int num_prompts,
                                    int group_size, float temperature, std::mt19937_64& rng,
                                    uint64_t policy_version, int64_t first_group) {
  std::vector<std::vector<token_id>> prompts;
  std::vector<sample> out;
  for (int i = 0; i < num_prompts; ++i) {
    task_prompt p = t.generate(rng);
    for (int g = 0; g < group_size; ++g) {
      prompts.push_back(p.tokens);
      sample s;
      s.prompt = p.tokens;
      s.group = first_group + i;
      s.policy_version = policy_version;
      out.push_back(std::move(s));
    }
  }
  ASSIGN_OR_RETURN(auto gen, policy.generate(prompts, t.max_completion_length(), temperature, rng));
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].completion = std::move(gen.completions[i]);
    out[i].behaviour_logprobs = std::move(gen.logprobs[i]);
  }
  return out;
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
  if (samples.empty()) return std::vector<std::vector<float>>{};
  ASSIGN_OR_RETURN(auto pb, pack(samples));
  forward_state st;
  STATUS_TRY(policy.forward(pb.tokens, pb.b, pb.t, &st, pb.mask));
  return gather_logprobs(samples, pb, st.logits, temperature);
}

result<update_stats> grpo_gradient(moe_policy& policy, const std::vector<sample>& samples,
                                   const std::vector<double>& advantages, const grpo_config& cfg,
                                   float temperature, moe_policy* ref, std::vector<float>* grads) {
  grads->assign(policy.layout().num_floats(), 0.0f);
  update_stats us;
  if (samples.empty()) return us;
  if (advantages.size() != samples.size())
    return error{errc::invalid_argument, "grpo_gradient: one advantage per sample needed"};
  ASSIGN_OR_RETURN(auto pb, pack(samples));
  forward_state st;
  STATUS_TRY(policy.forward(pb.tokens, pb.b, pb.t, &st, pb.mask));
  auto logp = gather_logprobs(samples, pb, st.logits, temperature);

  std::vector<std::vector<float>> ref_logp;
  if (cfg.kl_coef > 0) {
    if (!ref)
      return error{errc::invalid_argument, "grpo_gradient: kl_coef > 0 needs a reference policy"};
    ASSIGN_OR_RETURN(auto r, completion_logprobs(*ref, samples, temperature));
    ref_logp = std::move(r);
  }
  std::vector<grpo_token_inputs> in(samples.size());
  for (size_t i = 0; i < samples.size(); ++i)
    in[i] = {logp[i].data(),
             samples[i].behaviour_logprobs.data(),
             ref_logp.empty() ? nullptr : ref_logp[i].data(),
             static_cast<int>(samples[i].completion.size()),
             advantages[i],
             samples[i].from_env.empty() ? nullptr : samples[i].from_env.data()};
  std::vector<std::vector<float>> dlogp;
  us.grpo = grpo_loss(in, cfg, &dlogp);
  us.aux_loss = st.aux_loss;

  // d logp(tok) / d logit_v = (1[v == tok] - softmax_v) / temperature
  std::vector<float> dlogits(st.logits.size(), 0.0f), lp(num_vocab);
  const int64_t p = samples[0].prompt.size();
  for (size_t i = 0; i < samples.size(); ++i)
    for (size_t j = 0; j < samples[i].completion.size(); ++j) {
      const int64_t row = i * pb.t + p - 1 + j;
      log_softmax_row(&st.logits[row * num_vocab], num_vocab, temperature, lp.data());
      const float g = dlogp[i][j] / temperature;
      for (int v = 0; v < num_vocab; ++v)
        dlogits[row * num_vocab + v] =
            g * ((v == samples[i].completion[j] ? 1.0f : 0.0f) - std::exp(lp[v]));
    }
  for (const auto& layer : st.layers)
    us.load_imbalance +=
        kernels::load_imbalance(layer.moe.tokens_per_expert.data(), policy.cfg().num_experts);
  us.load_imbalance /= std::max<size_t>(1, st.layers.size());
  STATUS_TRY(policy.backward(st, dlogits, grads));
  return us;
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
  std::mt19937_64 rng(cfg.seed);
  adam opt(cfg.adam, policy.layout().num_floats());
  std::unique_ptr<moe_policy> ref;
  std::unique_ptr<expert_exchange> ref_exchange;
  if (cfg.grpo.kl_coef > 0) {  // the reference is the starting policy, frozen
    ref_exchange = make_local_expert_exchange();
    ASSIGN_OR_RETURN(auto r, moe_policy::create(policy.cfg(), *ref_exchange));
    ref = std::move(r);
    ref->params() = policy.params();
  }
  std::vector<iteration_stats> curve;
  std::vector<float> grads;
  for (int it = 0; it < cfg.iterations; ++it) {
    iteration_stats s;
    s.iteration = it;
    auto t0 = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(auto samples, rollout(policy, t, cfg.prompts_per_iteration,
                                           cfg.grpo.group_size, cfg.temperature, rng, uint64_t(it),
                                           int64_t(it) * cfg.prompts_per_iteration));
    s.t_generate = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    STATUS_TRY(score_samples(rm, &samples));
    s.t_reward = seconds_since(t0);
    for (const auto& smp : samples) {
      s.mean_reward += smp.reward;
      ASSIGN_OR_RETURN(auto score, t.verify(smp.prompt, smp.completion));
      s.mean_task_score += score;
      s.exact_fraction += score >= t.reward_max();
    }
    s.mean_reward /= samples.size();
    s.mean_task_score /= samples.size();
    s.exact_fraction /= samples.size();
    t0 = std::chrono::steady_clock::now();
    const auto adv = group_advantages(samples);
    for (int e = 0; e < cfg.grpo.epochs; ++e) {
      ASSIGN_OR_RETURN(auto us, grpo_gradient(policy, samples, adv, cfg.grpo, cfg.temperature,
                                              ref.get(), &grads));
      s.update = us;
      ASSIGN_OR_RETURN(auto norm, opt.step(policy.params(), grads));
      s.grad_norm = norm;
    }
    s.t_train = seconds_since(t0);
    curve.push_back(s);
    if (on_iteration && !on_iteration(s)) break;
  }
  return curve;
}

}  // namespace moerl::policy
