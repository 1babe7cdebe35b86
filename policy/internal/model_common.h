// Private to the policy (policy/model.cpp) and its device twin (policy/cuda/model_cuda*.cu):
// the parts of the model that do not depend on where its tensors live, written once so the
// two cannot drift apart: argument checks with their messages, and generation's sampling of
// one decode step from host logits.
#pragma once

#if !defined(MOERL_INSIDE_moerl_policy) && !defined(MOERL_INSIDE_moerl_policy_cuda)
#error \
    "policy/internal/model_common.h is private to moerl_policy and moerl_policy_cuda (policy/): include policy/model.h"
#endif

#include <cstdint>
#include <random>
#include <vector>

#include "common/error.h"
#include "policy/model.h"

namespace moerl::policy::detail {

// forward's checks: tokens form a [b, t] batch of vocabulary ids, t <= max_seq_len, the mask
// is empty or one entry per token. errc::invalid_argument naming what is wrong.
status check_forward_args(const model_config& cfg, const std::vector<token_id>& tokens, int64_t b,
                          int64_t t, const std::vector<uint8_t>& mask);
// generate's checks (prompts non-empty, of equal length, of vocabulary ids; prompt + max_new
// within max_seq_len; temperature > 0). prompts must not be empty.
status check_generate_args(const model_config& cfg,
                           const std::vector<std::vector<token_id>>& prompts, int max_new,
                           float temperature);

// One decode step's sampling: for every active row r of logits [num_rows, num_vocab] (host),
// draws a token from softmax(logits / temperature) with one uniform draw of rng, appends it
// and its log-probability to out, and retires the row at EOS or after max_new tokens.
// Returns whether any row is still active.
bool sample_step(const float* logits, int64_t num_rows, float temperature, int max_new,
                 std::mt19937_64& rng, std::vector<uint8_t>& active, generation& out);

}  // namespace moerl::policy::detail
