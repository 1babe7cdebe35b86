// GRPO (Shao et al., DeepSeekMath): G samples per prompt, each sample's advantage is its
// reward normalised within its group, (r - mean_group) / (std_group + 1e-6), and the policy
// maximises the PPO clipped surrogate per completion token
//   min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A),  ratio = pi_theta(tok) / pi_behaviour(tok)
// averaged over each completion's tokens, then over samples, minus kl_coef times the
// k3 estimate of KL(pi_theta || pi_ref):  exp(ref - lp) - (ref - lp) - 1.
//
// Off-policy samples. pi_behaviour is the policy version that GENERATED the sample; its
// per-token logprobs travel with the sample (sample::behaviour_logprobs) and the ratio is
// taken against them, never against the trainer's current weights at batch time. For a
// sample generated s versions ago this ratio is the importance weight that corrects the
// gradient from pi_behaviour's distribution to pi_theta's; clipping bounds its variance
// (ratios past 1 +- eps stop contributing gradient), and buffer admission bounds s
// (actors' max_staleness) so the clipped estimate stays close to on-policy. An on-policy
// sample has ratio 1 at the first epoch. The fraction of clipped tokens is reported.
// Logprobs on both sides use the sampling temperature (logits / temperature).
#pragma once

#include <cstdint>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "policy/vocab.h"

namespace moerl::policy {

struct grpo_config {
  int group_size = 8;  // G samples per prompt
  double clip_eps = 0.2;
  double kl_coef = 0.0;  // 0: no reference policy needed
  int epochs = 1;        // optimiser passes over each batch
  // From keys grpo.group_size, grpo.clip_eps, grpo.kl_coef, grpo.epochs.
  static result<grpo_config> from_config(const config& cfg);
};

// One generated completion and what training needs about it.
struct sample {
  std::vector<token_id> prompt;
  std::vector<token_id> completion;
  std::vector<float> behaviour_logprobs;  // one per completion token
  double reward = 0;
  int64_t group = 0;            // samples of one prompt share a group id
  uint64_t policy_version = 0;  // weight version that generated it
  // Multi-turn episodes: 1 where completion[j] is an environment reply the policy conditions
  // on but did not sample (no loss on it; its behaviour logprob is ignored). Empty: every
  // completion token is the policy's.
  std::vector<uint8_t> from_env;
};

// Advantages per sample: rewards normalised inside each group (samples with equal
// `group`). A group whose rewards are all equal carries no signal: advantages 0.
std::vector<double> group_advantages(const std::vector<sample>& samples);

// Per-token inputs of the surrogate for one sample.
struct grpo_token_inputs {
  const float* logprobs;            // under the policy being trained [len]
  const float* behaviour_logprobs;  // [len]
  const float* ref_logprobs;        // [len] or nullptr (kl_coef == 0)
  int len;
  double advantage;
  const uint8_t* from_env = nullptr;  // [len] or nullptr: tokens with 1 carry no loss
};

struct grpo_loss_stats {
  double loss = 0;           // the minimised objective (negated surrogate + KL term)
  double mean_ratio = 0;     // over tokens
  double clip_fraction = 0;  // tokens whose ratio was clipped in the active branch
  double kl = 0;             // mean per-token k3 KL estimate (0 without a reference)
  int64_t num_tokens = 0;
};

// Loss over a batch (mean over samples of the per-sample mean over its policy tokens) and, into
// dlogprobs[i][j], its derivative with respect to logprobs of sample i, token j.
grpo_loss_stats grpo_loss(const std::vector<grpo_token_inputs>& batch, const grpo_config& cfg,
                          std::vector<std::vector<float>>* dlogprobs);

}  // namespace moerl::policy
