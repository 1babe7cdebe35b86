// How the MoE layer reaches experts that may live on other ranks, in DeepEP's token form:
// the layer hands the exchange its tokens with their top-k routing, gets back the rows its
// own experts must process (expert-major), runs the grouped FFN on them, and hands the
// outputs back with the handle; combine returns each token's weighted sum over its top-k.
//
// Ownership: experts are split contiguously, expert e lives on rank
// e / (num_experts / num_ranks()) (the same rule as kernels::dispatch_layout_params).
//
// Row order (part of the contract, so that every implementation gives the same rows and
// results are reproducible bit for bit): one received row per (source token, k) whose expert
// is local; local expert j's rows are [local_expert_offset[j], local_expert_offset[j + 1]),
// and inside one expert rows are ordered by (source rank, source token, k). This is the order
// fabric::ep_group delivers, so no implementation sorts.
//
// Arithmetic: combine sums a token's terms in fp32 (kernels::combine_forward's accumulation),
// each implementation in a fixed order, so results are bitwise reproducible run to run. The
// order of terms may differ between implementations (fabric's normal mode adds per-rank
// partial sums); with top_k <= 2 every order gives the same bits (two terms commute).
//
// Collective contract: every rank of the group calls dispatch / dispatch_cached / combine /
// dispatch_backward in the same order, including ranks with zero tokens (a decode step where
// all of a rank's sequences finished still takes part). Each dispatch is followed by the
// combine of its handle, each dispatch_cached by the dispatch_backward of its handle, before
// the next dispatch or dispatch_cached in the same mode: forward is dispatch then combine,
// backward is dispatch_cached (gradients of the outputs travel to the experts like the
// tokens did, no count exchange) then dispatch_backward (gradients of the inputs and of the
// routing weights travel back like the outputs). fabric::ep_group holds one step open at a
// time, and this pairing is exactly its dispatch/combine alternation.
//
// Threading: one thread per rank drives its exchange.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/error.h"

namespace moerl::policy {

// Which of fabric/'s modes an operation should use: decode steps move few tokens and want
// latency, training moves many and wants throughput. A hint; the in-process group ignores it.
enum class exchange_mode { normal, low_latency };

class expert_exchange;

struct exchange_handle {
  const expert_exchange* issuer = nullptr;  // the exchange whose dispatch made it
  int64_t num_tokens = 0;                   // this rank's tokens at dispatch
  int top_k = 0;
  int64_t num_recv_rows = 0;  // rows received for this rank's local experts
  // [num_local_experts + 1]: local expert j's received rows are
  // [local_expert_offset[j], local_expert_offset[j + 1]) (what kernels::expert_ffn_* take).
  std::vector<int64_t> local_expert_offset;
  // [num_recv_rows]: the routing weight of each received row (DeepEP's recv_topk_weights,
  // one entry per row): backward scales the gradient of an expert output by it.
  std::vector<float> recv_weights;
  std::shared_ptr<void> impl;  // the implementation's routing state (who sent which rows)
};

class expert_exchange {
 public:
  virtual ~expert_exchange() = default;
  virtual int rank() const = 0;
  virtual int num_ranks() const = 0;

  // x            [num_tokens, hidden] this rank's tokens
  // topk_idx     [num_tokens, top_k] global expert ids, -1 = unused slot
  // topk_weights [num_tokens, top_k] combine weights
  // recv_x       out, resized to [handle.num_recv_rows, hidden] in the contract's row order
  // The inputs are copied or consumed before the call returns.
  virtual result<exchange_handle> dispatch(const float* x, const int64_t* topk_idx,
                                           const float* topk_weights, int64_t num_tokens, int top_k,
                                           int num_experts, int64_t hidden, exchange_mode mode,
                                           std::vector<float>* recv_x) = 0;
  // expert_out [h.num_recv_rows, hidden] in recv_x's order -> y [h.num_tokens, hidden]:
  // y[t] = sum over used k of topk_weights[t, k] * expert_out(t, k); zeros for a token with
  // no used slot.
  virtual status combine(const exchange_handle& h, const float* expert_out, int64_t hidden,
                         exchange_mode mode, float* y) = 0;

  // Backward, first half: x [h.num_tokens, hidden] (the gradients of y) moves as h's
  // dispatch moved its tokens; recv_x [h.num_recv_rows, hidden], unweighted.
  virtual status dispatch_cached(const exchange_handle& h, const float* x, int64_t hidden,
                                 exchange_mode mode, std::vector<float>* recv_x) = 0;
  // Backward, second half (the backward of dispatch): grad_recv_x [h.num_recv_rows, hidden]
  // and grad_recv_weights [h.num_recv_rows] go back to the token and slot they came from:
  // grad_x [h.num_tokens, hidden] = sum over used k of grad_recv_x(t, k) (overwritten);
  // grad_topk_weights [h.num_tokens, top_k] = grad_recv_weights(t, k), 0 for unused slots.
  virtual status dispatch_backward(const exchange_handle& h, const float* grad_recv_x,
                                   const float* grad_recv_weights, int64_t hidden,
                                   exchange_mode mode, float* grad_x, float* grad_topk_weights) = 0;
};

// One rank that owns every expert: the in-process group of one rank, so that a single-rank
// policy runs the same code path as an expert-parallel one.
std::unique_ptr<expert_exchange> make_local_expert_exchange();

// num_ranks exchanges of one expert-parallel group inside this process, each meant to be
// driven by its own thread (the collective calls block until every rank has made them).
// The in-memory reference of the contract above, for tests and for comparing fabric/'s
// group against; combine sums a token's terms in k order (kernels::combine_rows_forward).
std::vector<std::unique_ptr<expert_exchange>> make_inprocess_expert_group(int num_ranks);

}  // namespace moerl::policy
