// Private to the policy (policy/trainer.cpp) and its device twin (policy/cuda/trainer_cuda.cpp):
// the GRPO iteration written once over the policy's type, so that `moerl learn` on the device
// runs the same rollout, packing, loss, gradient and loop as on the CPU. What differs between
// the two policies (where the forward state, the gradient and the optimiser live; how the
// frozen reference is copied) is policy_traits<Policy>: the CPU's below, the device's in
// policy/cuda/trainer_cuda.cpp. The GRPO loss itself runs on the host from host logits in both.
#pragma once

#if !defined(MOERL_INSIDE_moerl_policy) && !defined(MOERL_INSIDE_moerl_policy_cuda)
#error \
    "policy/internal/grpo_step.h is private to moerl_policy and moerl_policy_cuda (policy/): include policy/trainer.h"
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "common/status_try.h"
#include "kernels/load_stats.h"
#include "policy/dense_ops.h"
#include "policy/trainer.h"

namespace moerl::policy::detail {

// Per policy type: state (forward's activations; .logits, .aux_loss and
// .layers[l].moe.tokens_per_expert on the host), grads, optimizer, and
//   status zero_grads(Policy&, grads*)
//   result<std::unique_ptr<optimizer>> make_optimizer(const adam_config&, Policy&)
//   result<double> step(optimizer&, Policy&, grads&)
//   result<std::shared_ptr<Policy>> frozen_copy(Policy&)
template <class Policy>
struct policy_traits;

template <>
struct policy_traits<moe_policy> {
  using state = forward_state;
  using grads = std::vector<float>;
  using optimizer = adam;
  static status zero_grads(moe_policy& p, grads* g) {
    g->assign(p.layout().num_floats(), 0.0f);
    return ok_status();
  }
  static result<std::unique_ptr<adam>> make_optimizer(const adam_config& c, moe_policy& p) {
    return std::make_unique<adam>(c, p.layout().num_floats());
  }
  static result<double> step(adam& opt, moe_policy& p, grads& g) { return opt.step(p.params(), g); }
  static result<std::shared_ptr<moe_policy>> frozen_copy(moe_policy& p) {
    struct holder {
      std::unique_ptr<expert_exchange> ex = make_local_expert_exchange();
      std::unique_ptr<moe_policy> policy;
    };
    auto h = std::make_shared<holder>();
    ASSIGN_OR_RETURN(h->policy, moe_policy::create(p.cfg(), *h->ex));
    h->policy->params() = p.params();
    return std::shared_ptr<moe_policy>(h, h->policy.get());
  }
};

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Prompt + completion, padded with tok_pad to a common length; completion token j of
// sample i is predicted by logits row i*t + prompt_len - 1 + j.
struct packed_batch {
  std::vector<token_id> tokens;
  std::vector<uint8_t> mask;  // 1 on prompt and completion positions, 0 on padding
  int64_t b = 0, t = 0;
};

result<packed_batch> pack(const std::vector<sample>& samples);

// logprob of each completion token from the logits rows that predict it.
std::vector<std::vector<float>> gather_logprobs(const std::vector<sample>& samples,
                                                const packed_batch& pb,
                                                const std::vector<float>& logits,
                                                float temperature);

// d(loss)/d(logits) [b*t, num_vocab] from d(loss)/d(logp) of each completion token.
std::vector<float> logits_gradient(const std::vector<sample>& samples, const packed_batch& pb,
                                   const std::vector<float>& logits,
                                   const std::vector<std::vector<float>>& dlogp, float temperature);

template <class Policy>
result<std::vector<sample>> rollout_t(Policy& policy, const task& t, int num_prompts,
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

template <class Policy>
result<std::vector<std::vector<float>>> completion_logprobs_t(Policy& policy,
                                                              const std::vector<sample>& samples,
                                                              float temperature) {
  if (samples.empty()) return std::vector<std::vector<float>>{};
  ASSIGN_OR_RETURN(auto pb, pack(samples));
  typename policy_traits<Policy>::state st;
  STATUS_TRY(policy.forward(pb.tokens, pb.b, pb.t, &st, pb.mask));
  return gather_logprobs(samples, pb, st.logits, temperature);
}

template <class Policy>
result<update_stats> grpo_gradient_t(Policy& policy, const std::vector<sample>& samples,
                                     const std::vector<double>& advantages, const grpo_config& cfg,
                                     float temperature, Policy* ref,
                                     typename policy_traits<Policy>::grads* grads) {
  STATUS_TRY(policy_traits<Policy>::zero_grads(policy, grads));
  update_stats us;
  if (samples.empty()) return us;
  if (advantages.size() != samples.size())
    return error{errc::invalid_argument, "grpo_gradient: one advantage per sample needed"};
  ASSIGN_OR_RETURN(auto pb, pack(samples));
  typename policy_traits<Policy>::state st;
  STATUS_TRY(policy.forward(pb.tokens, pb.b, pb.t, &st, pb.mask));
  auto logp = gather_logprobs(samples, pb, st.logits, temperature);

  std::vector<std::vector<float>> ref_logp;
  if (cfg.kl_coef > 0) {
    if (!ref)
      return error{errc::invalid_argument, "grpo_gradient: kl_coef > 0 needs a reference policy"};
    ASSIGN_OR_RETURN(auto r, completion_logprobs_t(*ref, samples, temperature));
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
  const auto dlogits = logits_gradient(samples, pb, st.logits, dlogp, temperature);
  for (const auto& layer : st.layers)
    us.load_imbalance +=
        kernels::load_imbalance(layer.moe.tokens_per_expert.data(), policy.cfg().num_experts);
  us.load_imbalance /= std::max<size_t>(1, st.layers.size());
  STATUS_TRY(policy.backward(st, dlogits, grads));
  return us;
}

template <class Policy>
result<std::vector<iteration_stats>> train_single_process_t(
    Policy& policy, const task& t, const reward_model& rm, const train_config& cfg,
    const std::function<bool(const iteration_stats&)>& on_iteration) {
  using traits = policy_traits<Policy>;
  std::mt19937_64 rng(cfg.seed);
  ASSIGN_OR_RETURN(auto opt, traits::make_optimizer(cfg.adam, policy));
  std::shared_ptr<Policy> ref;
  if (cfg.grpo.kl_coef > 0) {  // the reference is the starting policy, frozen
    ASSIGN_OR_RETURN(ref, traits::frozen_copy(policy));
  }
  std::vector<iteration_stats> curve;
  typename traits::grads grads;
  for (int it = 0; it < cfg.iterations; ++it) {
    iteration_stats s;
    s.iteration = it;
    auto t0 = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(
        auto samples,
        rollout_t(policy, t, cfg.prompts_per_iteration, cfg.grpo.group_size, cfg.temperature, rng,
                  uint64_t(it), int64_t(it) * cfg.prompts_per_iteration));
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
      ASSIGN_OR_RETURN(auto us, grpo_gradient_t(policy, samples, adv, cfg.grpo, cfg.temperature,
                                                ref.get(), &grads));
      s.update = us;
      ASSIGN_OR_RETURN(auto norm, traits::step(*opt, policy, grads));
      s.grad_norm = norm;
    }
    s.t_train = seconds_since(t0);
    curve.push_back(s);
    if (on_iteration && !on_iteration(s)) break;
  }
  return curve;
}

}  // namespace moerl::policy::detail
