// "guess": a multi-turn task whose reward needs the environment's replies. The environment
// hides a number in 0..9 (drawn from the episode seed); each turn the policy answers one
// digit and the environment replies '+' (the number is higher) or 's' (smaller), or ends
// the episode when the digit is right (reward 1) or the turn budget is spent (reward 0).
// A token that is not a digit forfeits the episode (reward 0): a bad move, not bad input.
//
// Prompt: "^" + the turn budget T as one digit + "=" ("^4=": four turns). A trajectory reads
// "5s2+3" (guessed 5: smaller; 2: higher; 3: found).
//
// Bounds (why the task needs the environment): an answer given in one turn, with no reply
// to read, finds the number with probability 1/10, so the best single-turn score is 0.1.
// T guesses that ignore the replies (T distinct digits) score at most T/10 (0.4 at T = 4).
// Reading the replies (binary search) finds any of the 10 numbers in 4 turns: 1.0 at T >= 4,
// (2^T - 1)/10 below.
//
// Thread-safety: a guess_env is one episode's state, used by one thread at a time.
#pragma once

#include <cstdint>
#include <vector>

#include "common/error.h"
#include "policy/vocab.h"

namespace moerl::policy {

constexpr int guess_max_value = 9;  // the hidden number is in 0..guess_max_value
constexpr int guess_max_turns = 9;  // the budget is one digit of the prompt
constexpr token_id guess_reply_higher = tok_plus;
constexpr token_id guess_reply_smaller = tok_sort;

// What the environment answers to a reset or a step.
struct env_reply {
  std::vector<token_id> observation;  // tokens the policy reads next (reset: the prompt)
  double reward = 0;                  // the episode's reward, final when done
  bool done = false;
};

std::vector<token_id> guess_prompt(int num_turns);
// The turn budget of a guess prompt; errc::invalid_argument names what is malformed.
result<int> parse_guess_prompt(const std::vector<token_id>& prompt);

// The bounds above, and the expected score of the uniformly random policy (every token of
// the vocabulary equally likely at every turn), for the report.
double guess_single_turn_bound();
double guess_open_loop_bound(int num_turns);
double guess_closed_loop_bound(int num_turns);
double guess_reward_random(int num_turns);

class guess_env {
 public:
  // Starts an episode: the hidden number from `episode_seed`; the observation is the prompt.
  // errc::invalid_argument when num_turns is outside 1..guess_max_turns.
  result<env_reply> reset(int num_turns, uint64_t episode_seed);
  // Starts an episode hiding `hidden` (0..guess_max_value), as a dataset row says.
  result<env_reply> reset_hidden(int num_turns, int hidden);
  // One guess: exactly one token. errc::invalid_argument names a malformed action (no
  // episode, an episode already over, not one token, a token outside the vocabulary); the
  // episode is unchanged by a refused action.
  result<env_reply> step(const std::vector<token_id>& action);

  int num_turns_used() const { return turns_used_; }

 private:
  int hidden_ = -1;  // -1: no episode
  int num_turns_ = 0;
  int turns_used_ = 0;
  bool done_ = false;
};

}  // namespace moerl::policy
