// The policy's tiny fixed vocabulary: one character per token, so prompts and completions
// print as readable strings ("^s312=" -> "123$"). Token ids are part of every checkpoint
// and sample: never renumber.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"

namespace moerl::policy {

using token_id = int32_t;

enum : token_id {
  tok_pad = 0,      // '_' fills sequences after EOS inside a batch; never sampled on purpose
  tok_bos = 1,      // '^' starts every prompt
  tok_eos = 2,      // '$' ends every completion
  tok_digit0 = 3,   // '0'..'9' are tok_digit0 + value
  tok_plus = 13,    // '+' separates the operands of the add task
  tok_equals = 14,  // '=' ends every prompt: the completion starts after it
  tok_sort = 15,    // 's' names the sort task
};
constexpr int num_vocab = 16;

inline token_id digit_token(int value) { return tok_digit0 + value; }
inline bool is_digit_token(token_id t) { return t >= tok_digit0 && t < tok_digit0 + 10; }
inline int digit_value(token_id t) { return t - tok_digit0; }

// One character per token; errc::invalid_argument names the first unknown character.
result<std::vector<token_id>> encode(const std::string& text);
// Ids outside the vocabulary print as '?'.
std::string decode(const std::vector<token_id>& tokens);

}  // namespace moerl::policy
