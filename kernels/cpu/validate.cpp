#include "kernels/internal/validate.h"

#include <cmath>

namespace moerl::kernels::detail {

status check_routing_params(const char* fn, const routing_params& p, int64_t num_tokens) {
  KERNELS_REQUIRE(num_tokens >= 0, fn, "num_tokens = ", num_tokens, " is negative");
  KERNELS_REQUIRE(p.num_experts > 0, fn, "num_experts = ", p.num_experts, " must be > 0");
  KERNELS_REQUIRE(p.topk >= 1 && p.topk <= p.num_experts, fn, "topk = ", p.topk,
                  " must be in [1, num_experts = ", p.num_experts, "]");
  KERNELS_REQUIRE(p.num_groups >= 1 && p.num_experts % p.num_groups == 0, fn,
                  "num_groups = ", p.num_groups, " must divide num_experts = ", p.num_experts);
  KERNELS_REQUIRE(p.topk_groups >= 1 && p.topk_groups <= p.num_groups, fn,
                  "topk_groups = ", p.topk_groups, " must be in [1, num_groups = ", p.num_groups,
                  "]");
  KERNELS_REQUIRE(p.num_groups == 1 || p.topk <= static_cast<int64_t>(p.topk_groups) *
                                                     (p.num_experts / p.num_groups),
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

status check_dispatch_layout_args(const char* fn, const int64_t* topk_idx,
                                  const dispatch_layout_params& p, const dispatch_layout_out& out) {
  // The two twins' copies of these checks had drifted: the CUDA one joined num_tokens and topk
  // into one message and did not check topk_idx. The CPU's are kept: a null topk_idx with
  // tokens to route would make the CUDA kernels read address 0 on the device, an illegal
  // access reported asynchronously at some later call that also poisons the CUDA context,
  // where the host can refuse it here with a message naming the argument.
  KERNELS_REQUIRE(p.num_tokens >= 0, fn, "num_tokens = ", p.num_tokens, " is negative");
  KERNELS_REQUIRE(p.topk >= 1, fn, "topk = ", p.topk, " must be >= 1");
  KERNELS_REQUIRE(p.num_experts >= 1 && p.num_ranks >= 1 && p.num_experts % p.num_ranks == 0, fn,
                  "num_experts = ", p.num_experts,
                  " must be a positive multiple of num_ranks = ", p.num_ranks);
  KERNELS_REQUIRE(p.expert_alignment >= 1, fn, "expert_alignment = ", p.expert_alignment,
                  " must be >= 1");
  KERNELS_REQUIRE(out.num_tokens_per_expert && out.num_tokens_per_rank, fn,
                  "num_tokens_per_expert and num_tokens_per_rank are required");
  KERNELS_REQUIRE(p.num_tokens == 0 || out.is_token_in_rank, fn, "is_token_in_rank is required");
  KERNELS_REQUIRE(!out.token_expert_slot || out.expert_offset, fn,
                  "token_expert_slot needs expert_offset");
  KERNELS_REQUIRE(p.num_tokens == 0 || topk_idx, fn, "topk_idx is null");
  return ok_status();
}

status invert_slots(const char* fn, const int64_t* token_expert_slot, int64_t num_tokens, int topk,
                    int64_t num_rows, std::vector<int64_t>* row_entry) {
  row_entry->assign(static_cast<size_t>(num_rows), -1);
  for (int64_t i = 0; i < num_tokens * topk; ++i) {
    const int64_t s = token_expert_slot[i];
    if (s == -1) continue;
    KERNELS_REQUIRE(s >= 0 && s < num_rows, fn, "token_expert_slot[", i / topk, ", ", i % topk,
                    "] = ", s, " is outside [-1, num_rows = ", num_rows, ")");
    KERNELS_REQUIRE((*row_entry)[s] == -1, fn, "row ", s, " is named by entries (",
                    (*row_entry)[s] / topk, ", ", (*row_entry)[s] % topk, ") and (", i / topk, ", ",
                    i % topk, ")");
    (*row_entry)[s] = i;
  }
  return ok_status();
}

status check_row_copies(const char* fn, const row_copy* copies, int64_t num_copies) {
  KERNELS_REQUIRE(num_copies >= 0, fn, "num_copies = ", num_copies, " is negative");
  KERNELS_REQUIRE(num_copies == 0 || copies, fn, "copies is null");
  for (int64_t i = 0; i < num_copies; ++i) {
    const row_copy& c = copies[i];
    KERNELS_REQUIRE(c.bytes >= 0, fn, "copy ", i, " has bytes = ", c.bytes, ", negative");
    KERNELS_REQUIRE(c.bytes == 0 || (c.dst && c.src), fn, "copy ", i, " of ", c.bytes,
                    " bytes has a null ", c.dst ? "src" : "dst");
  }
  return ok_status();
}

status check_row_shape(const char* fn, int64_t num_tokens, int topk, int64_t hidden,
                       int64_t num_rows) {
  KERNELS_REQUIRE(num_tokens >= 0 && topk >= 1 && hidden >= 1 && num_rows >= 0, fn,
                  "bad shape num_tokens = ", num_tokens, ", topk = ", topk, ", hidden = ", hidden,
                  ", num_rows = ", num_rows);
  return ok_status();
}

status check_expert_ffn_shape(const char* fn, const expert_ffn_shape& s, const int64_t* offset) {
  KERNELS_REQUIRE(s.num_experts >= 1 && s.hidden >= 1 && s.ffn_dim >= 1, fn,
                  "bad shape num_experts = ", s.num_experts, ", hidden = ", s.hidden,
                  ", ffn_dim = ", s.ffn_dim);
  KERNELS_REQUIRE(offset != nullptr, fn, "expert_offset is null");
  KERNELS_REQUIRE(offset[0] == 0, fn, "expert_offset[0] = ", offset[0], " must be 0");
  for (int e = 0; e < s.num_experts; ++e)
    KERNELS_REQUIRE(offset[e + 1] >= offset[e], fn,
                    "expert_offset is not non-decreasing at expert ", e, " (", offset[e], " > ",
                    offset[e + 1], ")");
  // GEMM dimensions are int: refuse what would overflow them rather than corrupt memory.
  constexpr int64_t int_limit = int64_t{1} << 31;
  KERNELS_REQUIRE(
      offset[s.num_experts] < int_limit && 2 * s.ffn_dim < int_limit && s.hidden < int_limit, fn,
      "a dimension exceeds the int range of BLAS and cuBLAS");
  return ok_status();
}

status check_slots(const char* fn, const int64_t* token_expert_slot, int64_t num_tokens, int topk,
                   int64_t num_rows) {
  for (int64_t i = 0; i < num_tokens * topk; ++i) {
    const int64_t s = token_expert_slot[i];
    KERNELS_REQUIRE(s >= -1 && s < num_rows, fn, "token_expert_slot[", i / topk, ", ", i % topk,
                    "] = ", s, " is outside [-1, num_rows = ", num_rows, ")");
  }
  return ok_status();
}

}  // namespace moerl::kernels::detail
