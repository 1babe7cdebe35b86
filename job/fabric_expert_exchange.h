// The multi-rank expert_exchange (policy/expert_exchange.h) carried by fabric/'s
// expert-parallel groups: the policy's expert-major send rows cross libfabric (shm, tcp,
// efa) instead of shared memory.
//
// How rows map onto fabric::ep_group: each row of the expert-major send buffer is one
// "token" routed with topk = 1 to the expert whose range holds it, weight 1.0, fp32. So a
// dispatch moves every row exactly once to its owner and a combine brings every row back
// exactly (a weighted sum of one term with weight 1 in fp32 is the row itself: training
// stays bit-exact; the only value whose bits change is -0.0, which arrives as +0.0, and the
// policy's next step — combine_forward / permute_backward — sums into a zero accumulator
// and makes that change itself anyway).
//
// Groups: one ep_group per exchange_mode, created over the same bootstrap at construction
// (a collective: every member calls make_fabric_expert_exchange with the same options):
// low_latency for decode steps, normal for training and prefill. Each group's buffers are
// sized by a bound on the rows one rank sends in one operation (see the options); a call
// over the bound is refused with errc::invalid_argument naming the bound before anything
// reaches the fabric (the other ranks of that step then fail with the group's timeout,
// naming the rank that did not show up) — never an overrun.
//
// Row order: the interface wants local expert j's rows ordered by source rank, then by the
// source's send order. ep_group orders each expert's rows by (source rank, source token,
// k), which with topk = 1 and token = send row is exactly that; every dispatch checks it
// from the rows' attribution and, should a group ever deliver another order, sorts the rows
// into the contract's order (and combine un-sorts them), counted in reordered_dispatches().
//
// Handles: ep_group only combines its latest dispatch, and a policy layer's backward
// combines a handle from long ago. A handle therefore keeps its routing (the expert of each
// send row); dispatch_cached re-dispatches it, and a combine whose handle is not the
// group's open step re-dispatches it (zeros, to rebuild the group's routing state) first.
// A group left with an open step (a dispatch not followed by its combine) is closed with a
// discarded combine before its next dispatch. All of these decisions depend only on the
// sequence of calls, which the collective contract makes the same on every rank.
//
// Threading: like every expert_exchange, one thread per rank drives its exchange.
// Teardown: destroy an exchange only after every member has finished its last call (a
// barrier on the control plane): its groups unmap their buffers and close their endpoints,
// and a member still writing to this rank would fail (or, with ranks as threads of one
// process over shm, fault: its writes land in unmapped memory).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/error.h"
#include "fabric/bootstrap.h"
#include "fabric/transport.h"
#include "policy/expert_exchange.h"

namespace moerl::policy {

struct fabric_exchange_options {
  fabric::transport_options transport;  // provider, require_provider, reorder shim
  std::vector<int> members;             // bootstrap ranks of the group, sorted; empty: all
  int num_experts = 0;                  // global experts; divisible by the group size
  int64_t hidden = 0;                   // floats per row (the policy's d_model)
  // The bound on expert-major rows one rank sends in one normal-mode operation: the most
  // tokens a rank runs through a training forward or a prefill step, times top_k (use
  // fabric_exchange_rows_bound). Sets the normal group's buffers: about
  // 3 * group size * bound * (hidden * 4 + 32) bytes per rank.
  int64_t max_rows_per_rank = 0;
  // The same bound for low_latency (decode) operations: sequences per decode step times
  // top_k. 0: max_rows_per_rank. The low-latency group writes one message per row, so it
  // suits decode steps (tens of rows); training-sized steps belong on the normal group.
  int64_t max_decode_rows_per_rank = 0;
  // false: no low_latency group; decode steps use the normal group (one endpoint fewer).
  bool low_latency_group = true;
  int64_t op_timeout_ms = 10000;  // a collective step not complete within this fails
  // Normal group only: members per node (0: one node). > 0 sends each row across the node
  // boundary once, to a gateway rank that forwards it inside the node (fabric/PROTOCOL.md).
  int ranks_per_node = 0;
  size_t chunk_bytes = 1 << 20;  // normal-mode bulk writes are cut into chunks of this
  // Tests only (0: off): shuffle each expert's received rows before the order check, as a
  // group that delivered another order would, so the sort and the combine's un-sort run.
  uint64_t test_shuffle_seed = 0;
};

// rows = tokens * top_k: a token visits top_k experts, one send row each.
int64_t fabric_exchange_rows_bound(int64_t max_tokens_per_rank, int top_k);

// Options for a node's policy ranks: the transport from fabric.provider /
// fabric.require_provider / fabric.reorder_shim (and their environment overrides),
// fabric.op_timeout_ms, the shape from policy.num_experts and policy.d_model, and the bounds
// from what the role runs: a training forward of max_train_tokens tokens per rank (normal
// group) and generate() over max_decode_sequences rows per rank (low_latency group: it
// steps every row one token at a time, prompt included). Either count 0: that group is
// sized like the other; both 0 is invalid_argument.
result<fabric_exchange_options> fabric_exchange_options_from_config(const moerl::config& cfg,
                                                                    int64_t max_train_tokens,
                                                                    int64_t max_decode_sequences);

class fabric_expert_exchange : public expert_exchange {
 public:
  // The transport the normal group runs on (provider, version, shim), for provenance.
  virtual const fabric::transport_description& describe() const = 0;
  // Dispatches whose received rows had to be sorted into the contract's order (0 while
  // ep_group keeps its documented order).
  virtual int64_t reordered_dispatches() const = 0;
  // Discarded combines and re-dispatches the handle bookkeeping above needed: the price of
  // calling the exchange out of dispatch/combine lockstep.
  virtual int64_t extra_steps() const = 0;
};

// Collective over opt.members through `boot`; `boot` is used only during this call.
result<std::unique_ptr<fabric_expert_exchange>> make_fabric_expert_exchange(
    fabric::bootstrap& boot, const fabric_exchange_options& opt);

}  // namespace moerl::policy
