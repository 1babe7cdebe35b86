// Reward models: how a sample's completion becomes a scalar reward. The verifier (the task's
// exact scorer, task.h) is the default; a learned reward model (a small network loaded
// from a checkpoint file) sits behind the same interface for tasks where no verifier exists
// or to study reward-model error.
//
// Thread-safety: score() is const and safe from any thread.
#pragma once

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "policy/task.h"
#include "policy/vocab.h"

namespace moerl::policy {

class reward_model {
 public:
  virtual ~reward_model() = default;
  // "verifier" or "learned".
  virtual std::string kind() const = 0;
  // Reward in [0, 1]. errc::invalid_argument names what is malformed about the prompt.
  virtual result<double> score(const std::vector<token_id>& prompt,
                               const std::vector<token_id>& completion) const = 0;
};

// Scores with task.verify(); the task must outlive the model.
std::unique_ptr<reward_model> make_verifier_reward(const task& t);

// A one-hidden-layer network over one-hot (position, token) features of prompt and
// completion (completion cut after its first EOS, padded to the task's budget):
//   score = sigmoid(w2 . tanh(W1^T x + b1) + b2)
// Checkpoint file: "MOERLRWD" | u32 task-name length | task name | u32 difficulty |
// parameter bytes (params.h format) with tensors rm.w1 [features, hidden], rm.b1 [hidden],
// rm.w2 [hidden], rm.b2 [1]. Loading checks the file was trained for this task.
class learned_reward_model final : public reward_model {
 public:
  // Fresh weights from `seed`.
  static std::unique_ptr<learned_reward_model> create(const task& t, int hidden, uint64_t seed);
  // errc::io_error when the file cannot be read; errc::malformed_message when its bytes are
  // not a reward-model checkpoint; errc::invalid_argument when it belongs to another task.
  static result<std::unique_ptr<learned_reward_model>> load(const task& t, const std::string& path);
  status save(const std::string& path) const;

  std::string kind() const override { return "learned"; }
  result<double> score(const std::vector<token_id>& prompt,
                       const std::vector<token_id>& completion) const override;

  // Supervised regression (mean squared error, Adam) onto `teacher`'s scores of completions
  // that are the correct answer with each token replaced at random with probability 1/2,
  // so every reward level is represented. Returns the mean squared error on fresh
  // held-out samples after training.
  result<double> fit(const reward_model& teacher, int num_steps, int batch_size,
                     double learning_rate, uint64_t seed);

  // A completion drawn as fit() draws them (exposed for tests).
  std::vector<token_id> perturbed_completion(const task_prompt& p, std::mt19937_64& rng) const;

 private:
  learned_reward_model(const task& t, int hidden);
  std::vector<int> active_features(const std::vector<token_id>& prompt,
                                   const std::vector<token_id>& completion) const;
  double forward(const std::vector<int>& features, std::vector<float>* hidden_act) const;

  const task& task_;
  int hidden_;
  int num_positions_;
  std::vector<float> params_;  // w1 | b1 | w2 | b2
};

// From keys task.reward (verifier|learned) and task.reward_model_path.
result<std::unique_ptr<reward_model>> make_reward(const config& cfg, const task& t);

}  // namespace moerl::policy
