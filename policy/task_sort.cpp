#include <algorithm>

#include "policy/task.h"

namespace moerl::policy {
namespace {

class sort_task final : public task {
 public:
  explicit sort_task(int k) : k_(k) {}
  std::string name() const override { return "sort"; }
  int difficulty() const override { return k_; }
  int prompt_length() const override { return k_ + 3; }  // ^ s d1..dk =
  int answer_length() const override { return k_; }

  task_prompt generate(std::mt19937_64& rng) const override {
    std::uniform_int_distribution<int> digit(0, 9);
    task_prompt p;
    p.tokens = {tok_bos, tok_sort};
    std::vector<int> values(k_);
    for (int& d : values) {
      d = digit(rng);
      p.tokens.push_back(digit_token(d));
    }
    p.tokens.push_back(tok_equals);
    std::sort(values.begin(), values.end());
    for (int d : values) p.target.push_back(digit_token(d));
    p.target.push_back(tok_eos);
    return p;
  }

  result<std::vector<token_id>> solve(const std::vector<token_id>& prompt) const override {
    if (static_cast<int>(prompt.size()) != prompt_length())
      return error{errc::invalid_argument,
                   "sort prompt '" + decode(prompt) + "' has " + std::to_string(prompt.size()) +
                       " tokens, expected " + std::to_string(prompt_length())};
    if (prompt[0] != tok_bos || prompt[1] != tok_sort || prompt.back() != tok_equals)
      return error{errc::invalid_argument,
                   "sort prompt '" + decode(prompt) + "' is not of the form ^s<digits>="};
    std::vector<token_id> answer(prompt.begin() + 2, prompt.end() - 1);
    for (token_id t : answer)
      if (!is_digit_token(t))
        return error{errc::invalid_argument,
                     "sort prompt '" + decode(prompt) + "' has a non-digit between 's' and '='"};
    std::sort(answer.begin(), answer.end());  // digit tokens are ordered like their values
    answer.push_back(tok_eos);
    return answer;
  }

 private:
  int k_;
};

}  // namespace

std::unique_ptr<task> make_sort_task(int num_digits) {
  return std::make_unique<sort_task>(num_digits);
}

}  // namespace moerl::policy
