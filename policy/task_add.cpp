#include "policy/task.h"

namespace moerl::policy {
namespace {

class add_task final : public task {
 public:
  explicit add_task(int n) : n_(n) {}
  std::string name() const override { return "add"; }
  int difficulty() const override { return n_; }
  int prompt_length() const override { return 2 * n_ + 3; }  // ^ a..a + b..b =
  int answer_length() const override { return n_ + 1; }

  task_prompt generate(std::mt19937_64& rng) const override {
    std::uniform_int_distribution<int> digit(0, 9);
    task_prompt p;
    p.tokens.push_back(tok_bos);
    for (int i = 0; i < n_; ++i) p.tokens.push_back(digit_token(digit(rng)));
    p.tokens.push_back(tok_plus);
    for (int i = 0; i < n_; ++i) p.tokens.push_back(digit_token(digit(rng)));
    p.tokens.push_back(tok_equals);
    p.target = *solve(p.tokens);  // cannot fail: the prompt was just built well-formed
    return p;
  }

  result<std::vector<token_id>> solve(const std::vector<token_id>& prompt) const override {
    if (static_cast<int>(prompt.size()) != prompt_length())
      return error{errc::invalid_argument,
                   "add prompt '" + decode(prompt) + "' has " + std::to_string(prompt.size()) +
                       " tokens, expected " + std::to_string(prompt_length())};
    if (prompt[0] != tok_bos || prompt[n_ + 1] != tok_plus || prompt.back() != tok_equals)
      return error{errc::invalid_argument,
                   "add prompt '" + decode(prompt) + "' is not of the form ^<digits>+<digits>="};
    // Operands are written most-significant digit first, as people write them.
    std::vector<token_id> answer;
    int carry = 0;
    for (int i = n_ - 1; i >= 0; --i) {
      token_id a = prompt[1 + i], b = prompt[n_ + 2 + i];
      if (!is_digit_token(a) || !is_digit_token(b))
        return error{errc::invalid_argument,
                     "add prompt '" + decode(prompt) + "' has a non-digit inside an operand"};
      int s = digit_value(a) + digit_value(b) + carry;
      answer.push_back(digit_token(s % 10));
      carry = s / 10;
    }
    answer.push_back(digit_token(carry));
    answer.push_back(tok_eos);
    return answer;
  }

 private:
  int n_;
};

}  // namespace

std::unique_ptr<task> make_add_task(int num_digits) {
  return std::make_unique<add_task>(num_digits);
}

}  // namespace moerl::policy
