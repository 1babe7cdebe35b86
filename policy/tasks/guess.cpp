#include "policy/tasks/guess.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace moerl::policy {

std::vector<token_id> guess_prompt(int num_turns) {
  return {tok_bos, digit_token(num_turns), tok_equals};
}

result<int> parse_guess_prompt(const std::vector<token_id>& prompt) {
  if (prompt.size() != 3 || prompt[0] != tok_bos || !is_digit_token(prompt[1]) ||
      prompt[2] != tok_equals || digit_value(prompt[1]) < 1)
    return error{errc::invalid_argument,
                 "guess prompt '" + decode(prompt) + "' is not of the form ^<turns 1..9>="};
  return digit_value(prompt[1]);
}

double guess_single_turn_bound() { return 1.0 / (guess_max_value + 1); }

double guess_open_loop_bound(int num_turns) {
  return std::min(num_turns, guess_max_value + 1) / double(guess_max_value + 1);
}

double guess_closed_loop_bound(int num_turns) {
  // A decision tree of depth T tells apart at most 2^T - 1 numbers.
  const double found = std::min<double>(std::pow(2.0, num_turns) - 1, guess_max_value + 1);
  return found / (guess_max_value + 1);
}

double guess_reward_random(int num_turns) {
  // Each turn: the right digit with 1/V, a wrong digit (going on) with 9/V, else forfeit.
  const double v = num_vocab, hit = 1.0 / v, miss = guess_max_value / v;
  double p = 0, reach = 1;
  for (int t = 0; t < num_turns; ++t) {
    p += reach * hit;
    reach *= miss;
  }
  return p;
}

result<env_reply> guess_env::reset(int num_turns, uint64_t episode_seed) {
  return reset_hidden(num_turns, static_cast<int>(episode_seed % (guess_max_value + 1)));
}

result<env_reply> guess_env::reset_hidden(int num_turns, int hidden) {
  if (num_turns < 1 || num_turns > guess_max_turns)
    return error{errc::invalid_argument, "guess: turn budget " + std::to_string(num_turns) +
                                             " is outside 1.." + std::to_string(guess_max_turns)};
  if (hidden < 0 || hidden > guess_max_value)
    return error{errc::invalid_argument, "guess: hidden number " + std::to_string(hidden) +
                                             " is outside 0.." + std::to_string(guess_max_value)};
  hidden_ = hidden;
  num_turns_ = num_turns;
  turns_used_ = 0;
  done_ = false;
  env_reply r;
  r.observation = guess_prompt(num_turns);
  return r;
}

result<env_reply> guess_env::step(const std::vector<token_id>& action) {
  if (hidden_ < 0) return error{errc::invalid_argument, "guess: step before reset"};
  if (done_) return error{errc::invalid_argument, "guess: step after the episode ended"};
  if (action.size() != 1)
    return error{errc::invalid_argument,
                 "guess: an action is one token, got " + std::to_string(action.size())};
  const token_id t = action[0];
  if (t < 0 || t >= num_vocab)
    return error{errc::invalid_argument,
                 "guess: action token " + std::to_string(t) + " is outside the vocabulary"};
  ++turns_used_;
  env_reply r;
  if (!is_digit_token(t)) {
    r.done = done_ = true;  // forfeit: reward 0
    return r;
  }
  const int g = digit_value(t);
  if (g == hidden_) {
    r.done = done_ = true;
    r.reward = 1.0;
    return r;
  }
  if (turns_used_ >= num_turns_) {
    r.done = done_ = true;
    return r;
  }
  r.observation = {g < hidden_ ? guess_reply_higher : guess_reply_smaller};
  return r;
}

}  // namespace moerl::policy
