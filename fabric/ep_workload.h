// Deterministic EP workloads and their reference results, shared by the tests and by
// `moerl bench ep` (whose `check` field runs the same checks on the benchmark's own data).
// Every rank can regenerate every rank's inputs from the seed, so each rank checks what it
// received and what it combined without any extra communication.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "fabric/ep_group.h"

namespace moerl::fabric {

struct workload_params {
  int num_ranks = 1;
  int num_experts = 0;
  int64_t hidden = 0;
  int topk = 0;
  ep_dtype dtype = ep_dtype::bf16;
  int64_t tokens_per_rank = 0;
  std::string routing =
      "uniform";               // uniform | zipf | one_rank (all of a token's experts on one rank)
  double zipf_s = 1.2;         // zipf exponent over expert popularity
  double mask_fraction = 0.0;  // share of (token, k) entries set to -1
  bool vary_tokens = false;    // ranks get different token counts (rank r: fewer)
  int zero_tokens_rank = -1;   // this rank dispatches zero tokens
  uint64_t seed = 1;
  int ranks_per_node = 0;  // normal mode's node grouping (0: one node); sets the
                           // reference combine's summation order
};

struct rank_inputs {
  int64_t num_tokens = 0;
  std::vector<char> x;              // [num_tokens, hidden] of dtype; row encodes (rank, token)
  std::vector<int64_t> topk_idx;    // [num_tokens, topk]
  std::vector<float> topk_weights;  // [num_tokens, topk]
};

rank_inputs make_rank_inputs(const workload_params& p, int rank);

// The stand-in expert: out = x * (1 + (e % 7) / 8), rounded to dtype, for every received
// row of local expert j (global id first_expert + j). expert_out as combine_send expects.
void apply_experts(const workload_params& p, int first_expert, const dispatch_output& d,
                   std::vector<char>& expert_out);

// Checks one rank's dispatch output against the reference built from all ranks' inputs:
// per-expert counts, the sorted set of (source rank, token, k) per expert, every payload
// byte, and that the payload's encoded rank and token match the attribution.
status check_dispatch(const workload_params& p, const std::vector<rank_inputs>& all, int rank,
                      const dispatch_output& d);

// The combine result this rank must get, bit for bit, in `mode`'s documented order.
std::vector<char> reference_combine(const workload_params& p, const std::vector<rank_inputs>& all,
                                    int rank, ep_mode mode);

// Bytes that a dispatch of this workload moves, by the benchmark's three definitions:
//   selection: DeepEP-LL's numerator, hidden bytes per (token, expert) selection;
//   logical: hidden bytes per (token, destination rank), what must cross at least once.
struct workload_bytes {
  uint64_t selection = 0;
  uint64_t logical = 0;
};
workload_bytes count_bytes(const workload_params& p, const std::vector<rank_inputs>& all);

}  // namespace moerl::fabric
