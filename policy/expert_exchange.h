// How the MoE layer reaches experts that may live on other ranks. The layer builds its
// expert-major send buffer (kernels::permute over ALL experts, ordered by global expert id,
// each expert's rows contiguous as kernels::get_dispatch_layout's expert_offset says),
// then asks the exchange to move each expert's rows to the rank that owns it, runs the
// grouped FFN on what it received for its own experts, and asks the exchange to bring
// the outputs back into the send buffer's layout.
//
// Ownership: experts are split contiguously, expert e lives on rank
// e / (num_experts / num_ranks()) (the same rule as kernels::dispatch_layout_params).
//
// Collective contract: every rank of the group calls dispatch / dispatch_cached / combine
// in the same order, including ranks with zero rows to send (a decode step where all of a
// rank's sequences finished still takes part).
//
// Backward reuses the forward's handle: gradients of the expert outputs travel like the
// forward's tokens (dispatch_cached, no count exchange), gradients of the expert inputs
// travel back like the outputs (combine).
//
// The single-rank implementation (make_local_expert_exchange) runs in-process; fabric/'s
// expert-parallel group provides the multi-rank one.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/error.h"

namespace moerl::policy {

// Which of fabric/'s modes an operation should use: decode steps move few tokens and want
// latency, training moves many and wants throughput. A hint; the local exchange ignores it.
enum class exchange_mode { normal, low_latency };

struct exchange_handle {
  int64_t num_send_rows = 0;  // rows of this rank's expert-major send buffer
  int64_t num_recv_rows = 0;  // rows received for this rank's local experts
  // [num_local_experts + 1]: local expert j's received rows are
  // [local_expert_offset[j], local_expert_offset[j + 1]) (what kernels::expert_ffn_* take).
  std::vector<int64_t> local_expert_offset;
  std::shared_ptr<void> impl;  // the implementation's routing state (who sent which rows)
};

class expert_exchange {
 public:
  virtual ~expert_exchange() = default;
  virtual int rank() const = 0;
  virtual int num_ranks() const = 0;

  // send_rows     [expert_offset[num_experts], hidden] this rank's expert-major buffer
  // expert_offset [num_experts + 1] row ranges per global expert
  // recv_rows     out, resized to [handle.num_recv_rows, hidden]
  virtual result<exchange_handle> dispatch(const float* send_rows, const int64_t* expert_offset,
                                           int num_experts, int64_t hidden, exchange_mode mode,
                                           std::vector<float>* recv_rows) = 0;
  // Same movement as the dispatch that produced `h`, for other rows of the same shape.
  virtual status dispatch_cached(const exchange_handle& h, const float* send_rows, int64_t hidden,
                                 exchange_mode mode, std::vector<float>* recv_rows) = 0;
  // Reverse movement: recv-shaped rows [h.num_recv_rows, hidden] go back to the rank and row
  // they were dispatched from; send_rows [h.num_send_rows, hidden] is overwritten.
  virtual status combine(const exchange_handle& h, const float* recv_rows, int64_t hidden,
                         exchange_mode mode, float* send_rows) = 0;
};

// One rank that owns every expert: dispatch and combine are copies.
std::unique_ptr<expert_exchange> make_local_expert_exchange();

// num_ranks exchanges of one expert-parallel group inside this process, each meant to be
// driven by its own thread (the collective calls block until every rank has made them).
// The in-memory reference of the multi-rank contract above, for tests and for comparing
// fabric/'s group against: rows received by rank r for its local expert j are ordered by
// source rank, and within a source as that source's send buffer orders them.
std::vector<std::unique_ptr<expert_exchange>> make_inprocess_expert_group(int num_ranks);

}  // namespace moerl::policy
