#include "kernels/dispatch_layout.h"

#include <algorithm>
#include <vector>

#include "kernels/internal/validate.h"

namespace moerl::kernels {

status get_dispatch_layout(thread_pool& pool, const int64_t* topk_idx,
                           const dispatch_layout_params& p, const dispatch_layout_out& out) {
  const char* fn = "get_dispatch_layout";
  if (auto st = detail::check_dispatch_layout_args(fn, topk_idx, p, out); !st) return st;
  if (auto st = detail::check_topk_idx(fn, topk_idx, p.num_tokens, p.topk, p.num_experts); !st)
    return st;

  const int64_t T = p.num_tokens;
  const int K = p.topk, E = p.num_experts, R = p.num_ranks;
  const int experts_per_rank = E / R;

  // Token-parallel: each token owns its row of is_token_in_rank.
  pool.parallel_for(
      T,
      [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          uint8_t* row = out.is_token_in_rank + t * R;
          std::fill(row, row + R, 0);
          for (int k = 0; k < K; ++k) {
            const int64_t x = topk_idx[t * K + k];
            if (x >= 0) row[x / experts_per_rank] = 1;
          }
        }
      },
      256);

  // The remaining passes are serial in token order: they are O(T * (topk + ranks)) integer
  // work, and token order is what makes the slot maps deterministic.
  std::fill(out.num_tokens_per_expert, out.num_tokens_per_expert + E, 0);
  for (int64_t i = 0; i < T * K; ++i)
    if (topk_idx[i] >= 0) ++out.num_tokens_per_expert[topk_idx[i]];

  std::fill(out.num_tokens_per_rank, out.num_tokens_per_rank + R, 0);
  for (int64_t t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) {
      const bool in = out.is_token_in_rank[t * R + r] != 0;
      if (out.token_rank_slot)
        out.token_rank_slot[t * R + r] = in ? out.num_tokens_per_rank[r] : -1;
      out.num_tokens_per_rank[r] += in;
    }

  if (out.expert_offset) {
    const int64_t a = p.expert_alignment;
    out.expert_offset[0] = 0;
    for (int e = 0; e < E; ++e)
      out.expert_offset[e + 1] =
          out.expert_offset[e] + (out.num_tokens_per_expert[e] + a - 1) / a * a;
  }
  if (out.token_expert_slot) {
    std::vector<int64_t> cursor(out.expert_offset, out.expert_offset + E);
    for (int64_t i = 0; i < T * K; ++i) {
      const int64_t x = topk_idx[i];
      out.token_expert_slot[i] = x >= 0 ? cursor[x]++ : -1;
    }
  }
  return ok_status();
}

}  // namespace moerl::kernels
