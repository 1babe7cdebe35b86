// Dispatch layout: from a top-k routing table, how many tokens go to each expert and rank,
// which ranks each token visits, and where every (token, k) entry lands in the expert-major
// buffer. The CPU twin of DeepEP's get_dispatch_layout, plus the slot maps that permute,
// combine and fabric/ share.
#pragma once

#include <cstdint>

#include "common/error.h"
#include "kernels/thread_pool.h"

namespace moerl::kernels {

struct dispatch_layout_params {
  int64_t num_tokens = 0;
  int topk = 0;
  int num_experts = 0;
  // Experts are split contiguously: expert e lives on rank e / (num_experts / num_ranks).
  // num_experts % num_ranks must be 0.
  int num_ranks = 1;
  // Each expert's block in the expert-major buffer is padded to a multiple of this (>= 1),
  // for kernels that want aligned per-expert row counts. Padding rows hold zeros.
  int expert_alignment = 1;
};

// Output buffers, caller-allocated. Pointers marked "optional" may be nullptr.
struct dispatch_layout_out {
  // [num_experts]: number of (token, k) entries naming expert e (unpadded).
  int64_t* num_tokens_per_expert = nullptr;
  // [num_ranks]: number of distinct tokens with at least one entry on rank r. A token whose
  // top-k lands on one rank several times is sent to it once (DeepEP's contract).
  int64_t* num_tokens_per_rank = nullptr;
  // [num_tokens, num_ranks], 0/1: is_token_in_rank[t * num_ranks + r] == 1 iff token t has
  // an entry on rank r.
  uint8_t* is_token_in_rank = nullptr;
  // optional [num_tokens, num_ranks]: position of token t in the send list for rank r (the
  // tokens for one rank ordered by token index), -1 when t does not go to r.
  int64_t* token_rank_slot = nullptr;
  // optional [num_experts + 1]: expert e's rows in the expert-major buffer are
  // [expert_offset[e], expert_offset[e + 1]); expert_offset[num_experts] is the buffer's
  // row count (padding included).
  int64_t* expert_offset = nullptr;
  // optional [num_tokens, topk] (needs expert_offset): row of entry (t, k) in the
  // expert-major buffer, -1 for a masked entry. Inside one expert, rows follow token index,
  // then k, so the layout is deterministic.
  int64_t* token_expert_slot = nullptr;
};

// topk_idx [num_tokens, topk] int64, -1 = masked entry. Any other id outside
// [0, num_experts) is an invalid_argument error naming the token and value, as are
// inconsistent params or missing required outputs.
status get_dispatch_layout(thread_pool& pool, const int64_t* topk_idx,
                           const dispatch_layout_params& p, const dispatch_layout_out& out);

}  // namespace moerl::kernels
