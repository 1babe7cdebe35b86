// The multi-rank policy::expert_exchange carried by fabric/'s expert-parallel groups: the
// policy's tokens and their top-k routing go to fabric::ep_group's dispatch as they are, and
// the group's expert-major rows, in the order the exchange contract names, come back.
// It lives in job/ because it binds two components that do not know each other (policy/
// has no networking, fabric/ no model), in job's namespace like the rest of job/.
//
// Side band: each row the group moves is hidden + top_k floats. ep_group delivers rows and
// a weighted sum, but neither the routing weight of a received row nor a per-(token, k)
// value on the way back (DeepEP returns them as recv_topk_weights and combine's
// combined_topk_weights). Dispatch therefore puts a token's top-k weights after its payload
// (the owner reads the weight of received row (t, k) at column hidden + k), and the
// backward's combine puts the gradient of each row's weight at column hidden + k with
// weight 1 and zeros elsewhere, so the sum over k returns each slot's value exactly.
//
// Groups: one ep_group per exchange_mode, created over the same bootstrap at construction
// (a collective: every member calls make_fabric_expert_exchange with the same options):
// low_latency for decode steps, normal for training and prefill. Each group's buffers are
// sized by a bound on the tokens one rank dispatches in one operation (see the options); a
// call over the bound is refused with errc::invalid_argument naming the bound before
// anything reaches the fabric (the other ranks of that step then fail with the group's
// timeout, naming the rank that did not show up) - never an overrun.
//
// Steps: ep_group holds one dispatch open until its combine. The exchange contract pairs
// dispatch with combine and dispatch_cached with dispatch_backward, which is exactly that;
// a call that breaks the pairing (a combine whose handle is not the group's open step, a
// dispatch while one is open) is refused with errc::invalid_argument. dispatch_cached is a
// fresh dispatch of the handle's routing (ep_group keeps no routing between steps).
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

namespace moerl::job {

struct fabric_exchange_options {
  fabric::transport_options transport;  // provider, require_provider, reorder shim
  std::vector<int> members;             // bootstrap ranks of the group, sorted; empty: all
  int num_experts = 0;                  // global experts; divisible by the group size
  int64_t hidden = 0;                   // floats per token (the policy's d_model)
  int top_k = 0;                        // experts per token (the policy's top_k)
  // The most tokens one rank dispatches in one normal-mode operation: a training forward or
  // a prefill step. Sets the normal group's buffers.
  int64_t max_tokens_per_rank = 0;
  // The same bound for low_latency (decode) operations: sequences per decode step. 0:
  // max_tokens_per_rank. The low-latency group writes one message per (token, expert), so
  // it suits decode steps (tens of tokens); training-sized steps belong on the normal group.
  int64_t max_decode_tokens_per_rank = 0;
  // false: no low_latency group; decode steps use the normal group (one endpoint fewer).
  bool low_latency_group = true;
  int64_t op_timeout_ms = 10000;  // a collective step not complete within this fails
  // Normal group only: members per node (0: one node). > 0 sends each token across the node
  // boundary once, to a gateway rank that forwards it inside the node (fabric/PROTOCOL.md).
  int ranks_per_node = 0;
  size_t chunk_bytes = 1 << 20;  // normal-mode bulk writes are cut into chunks of this
};

// Options for a node's policy ranks: the transport from fabric.provider /
// fabric.require_provider / fabric.reorder_shim (and their environment overrides),
// fabric.op_timeout_ms, the shape from policy.num_experts, policy.d_model and policy.top_k,
// and the bounds from what the role runs: a training forward of max_train_tokens tokens per
// rank (normal group) and generate() over max_decode_sequences rows per rank (low_latency
// group: it steps every row one token at a time, prompt included). Either count 0: that
// group is sized like the other; both 0 is invalid_argument.
result<fabric_exchange_options> fabric_exchange_options_from_config(const moerl::config& cfg,
                                                                    int64_t max_train_tokens,
                                                                    int64_t max_decode_sequences);

class fabric_expert_exchange : public policy::expert_exchange {
 public:
  // The transport the normal group runs on (provider, version, shim), for provenance.
  virtual const fabric::transport_description& describe() const = 0;
};

// Collective over opt.members through `boot`; `boot` is used only during this call.
result<std::unique_ptr<fabric_expert_exchange>> make_fabric_expert_exchange(
    fabric::bootstrap& boot, const fabric_exchange_options& opt);

}  // namespace moerl::job
