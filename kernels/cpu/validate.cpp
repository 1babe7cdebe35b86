#include "kernels/cpu/validate.h"

#include <cmath>

namespace moerl::kernels::detail {

status check_routing_params(const char* fn, const routing_params& p, int64_t num_tokens) {
  KERNELS_REQUIRE(num_tokens >= 0, fn, "num_tokens = ", num_tokens, " is negative");
  KERNELS_REQUIRE(p.num_experts > 0, fn, "num_experts = ", p.num_experts, " must be > 0");
  KERNELS_REQUIRE(p.topk >= 1 && p.topk <= p.num_experts, fn, "topk = ", p.topk,
                  " must be in [1, num_experts = ", p.num_experts, "]");
  KERNELS_REQUIRE(p.num_groups >= 1 && p.num_experts % p.num_groups == 0, fn,
                  "num_groups = ", p.num_groups, " must divide num_experts = ", p.num_experts);
  KERNELS_REQUIRE(p.topk_groups >= 1 && p.topk_groups <= p.num_groups, fn, "topk_groups = ",
                  p.topk_groups, " must be in [1, num_groups = ", p.num_groups, "]");
  KERNELS_REQUIRE(
      p.num_groups == 1 ||
          p.topk <= static_cast<int64_t>(p.topk_groups) * (p.num_experts / p.num_groups),
      fn, "topk = ", p.topk, " exceeds the experts in topk_groups = ", p.topk_groups,
      " groups of ", p.num_experts / p.num_groups);
  KERNELS_REQUIRE(std::isfinite(p.route_scale), fn, "route_scale is not finite");
  return ok_status();
}

status check_topk_idx(const char* fn, const int64_t* topk_idx, int64_t num_tokens, int topk,
                      int num_experts) {
  for (int64_t t = 0; t < num_tokens; ++t)
    for (int k = 0; k < topk; ++k) {
      const int64_t e = topk_idx[t * topk + k];
      KERNELS_REQUIRE(e >= -1 && e < num_experts, fn, "topk_idx[", t, ", ", k, "] = ", e,
                      " is neither -1 nor an expert id in [0, ", num_experts, ")");
    }
  return ok_status();
}

status invert_slots(const char* fn, const int64_t* token_expert_slot, int64_t num_tokens,
                    int topk, int64_t num_rows, std::vector<int64_t>* row_entry) {
  row_entry->assign(static_cast<size_t>(num_rows), -1);
  for (int64_t i = 0; i < num_tokens * topk; ++i) {
    const int64_t s = token_expert_slot[i];
    if (s == -1) continue;
    KERNELS_REQUIRE(s >= 0 && s < num_rows, fn, "token_expert_slot[", i / topk, ", ",
                    i % topk, "] = ", s, " is outside [-1, num_rows = ", num_rows, ")");
    KERNELS_REQUIRE((*row_entry)[s] == -1, fn, "row ", s, " is named by entries (",
                    (*row_entry)[s] / topk, ", ", (*row_entry)[s] % topk, ") and (", i / topk,
                    ", ", i % topk, ")");
    (*row_entry)[s] = i;
  }
  return ok_status();
}

status check_slots(const char* fn, const int64_t* token_expert_slot, int64_t num_tokens,
                   int topk, int64_t num_rows) {
  for (int64_t i = 0; i < num_tokens * topk; ++i) {
    const int64_t s = token_expert_slot[i];
    KERNELS_REQUIRE(s >= -1 && s < num_rows, fn, "token_expert_slot[", i / topk, ", ",
                    i % topk, "] = ", s, " is outside [-1, num_rows = ", num_rows, ")");
  }
  return ok_status();
}

}  // namespace moerl::kernels::detail
