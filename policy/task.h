// Verifiable tasks the policy learns. A task generates prompts, knows the one correct
// completion of each, and scores any completion against it.
//
// Scoring (the reward; partial credit on purpose, so GRPO sees a dense signal): the target
// completion is the answer's L digits followed by EOS, L+1 positions. The score is the
// fraction of those positions where the completion (cut after its first EOS) has the
// target token: 1.0 for the exact answer, 0 for nothing right. Tokens a completion
// produces past position L are ignored (generation stops there anyway).
//
// Thread-safety: a task is immutable after construction; verify() and generate() may be
// called from any thread (generate() only touches the caller's rng).
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "policy/vocab.h"

namespace moerl::policy {

struct task_prompt {
  std::vector<token_id> tokens;  // BOS ... '=': what the policy is conditioned on
  std::vector<token_id> target;  // the correct completion: answer digits then EOS
};

class task {
 public:
  virtual ~task() = default;

  // "sort" or "add".
  virtual std::string name() const = 0;
  // The knob the config turns: k digits to sort, n digits per operand.
  virtual int difficulty() const = 0;
  // Every prompt of this task has this many tokens.
  virtual int prompt_length() const = 0;
  // L: digits in every answer (the target has L+1 tokens with EOS).
  virtual int answer_length() const = 0;
  // Generation budget: the target's length; a completion never needs more.
  int max_completion_length() const { return answer_length() + 1; }

  virtual task_prompt generate(std::mt19937_64& rng) const = 0;
  // The correct completion of a prompt, recomputed from the prompt alone (the verifier
  // never trusts a target carried beside a sample). errc::invalid_argument names what is
  // malformed when the tokens are not a prompt of this task at this difficulty.
  virtual result<std::vector<token_id>> solve(const std::vector<token_id>& prompt) const = 0;

  // Score in [0, 1] as described at the top of this file.
  result<double> verify(const std::vector<token_id>& prompt,
                        const std::vector<token_id>& completion) const;

  double reward_max() const { return 1.0; }
  // Expected score of the random policy: uniform over the whole vocabulary at every step,
  // stopping at its first EOS or after max_completion_length() tokens. Exact:
  // position i (< L, a digit) scores iff no EOS in tokens 0..i-1 and token i is right:
  // q^i / V with q = (V-1)/V; the EOS position L scores with q^L / V. Mean over L+1.
  double reward_random() const;
};

// Score of `completion` against `target` (the rule above); shared by tasks and tests.
double score_against_target(const std::vector<token_id>& target,
                            const std::vector<token_id>& completion);

// "sort": prompt "^s" + k digits + "="; answer: the digits in ascending order.
std::unique_ptr<task> make_sort_task(int num_digits);
// "add": prompt "^" + n digits + "+" + n digits + "="; answer: the sum as n+1 digits
// written least-significant digit first (so each digit depends only on digits already
// generated plus the prompt: the carry flows in generation order), zero-padded.
std::unique_ptr<task> make_add_task(int num_digits);

// By name and difficulty; errc::invalid_config names the bad value.
result<std::unique_ptr<task>> make_task(const std::string& name, int64_t difficulty);
// From keys task.name and task.difficulty.
result<std::unique_ptr<task>> make_task(const config& cfg);

}  // namespace moerl::policy
