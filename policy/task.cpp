#include "policy/task.h"

#include <cmath>

#include "common/status_try.h"

namespace moerl::policy {

double score_against_target(const std::vector<token_id>& target,
                            const std::vector<token_id>& completion) {
  if (target.empty()) return 0.0;
  size_t right = 0;
  for (size_t i = 0; i < target.size() && i < completion.size(); ++i) {
    if (completion[i] == target[i]) ++right;
    if (completion[i] == tok_eos) break;  // nothing after the first EOS counts
  }
  return static_cast<double>(right) / static_cast<double>(target.size());
}

result<double> task::verify(const std::vector<token_id>& prompt,
                            const std::vector<token_id>& completion) const {
  ASSIGN_OR_RETURN(auto target, solve(prompt));
  return score_against_target(target, completion);
}

double task::reward_random() const {
  const double v = num_vocab;
  const double q = (v - 1.0) / v;
  const int len = answer_length();
  double sum = 0.0;
  for (int i = 0; i <= len; ++i) sum += std::pow(q, i) / v;
  return sum / (len + 1);
}

result<std::unique_ptr<task>> make_task(const std::string& name, int64_t difficulty) {
  // Upper bounds keep prompts inside the policy's position table (policy.max_seq_len).
  if (name == "sort") {
    if (difficulty < 1 || difficulty > 16)
      return error{errc::invalid_config, "task.difficulty " + std::to_string(difficulty) +
                                             " is outside 1..16 (digits to sort) for task 'sort'"};
    return make_sort_task(static_cast<int>(difficulty));
  }
  if (name == "add") {
    if (difficulty < 1 || difficulty > 8)
      return error{errc::invalid_config,
                   "task.difficulty " + std::to_string(difficulty) +
                       " is outside 1..8 (digits per operand) for task 'add'"};
    return make_add_task(static_cast<int>(difficulty));
  }
  return error{errc::invalid_config, "task.name '" + name + "' is not a task (sort|add)"};
}

result<std::unique_ptr<task>> make_task(const config& cfg) {
  return make_task(cfg.get_string("task.name"), cfg.get_int("task.difficulty"));
}

}  // namespace moerl::policy
