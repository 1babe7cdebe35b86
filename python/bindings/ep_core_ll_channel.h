// ep_core's low-latency channel (private to python/bindings/): the state of one ep_group in
// fabric's low-latency mode, shared by ep_core.cpp (which owns the map) and ep_core_ll.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fabric/device_memory.h"
#include "fabric/ep_group.h"
#include "python/bindings/ep_core.h"
#include "python/bindings/ep_core_scratch.h"

namespace moerl::py {

struct ep_core::ll_channel {
  std::string name;
  std::unique_ptr<fabric::ep_group> group;
  ll_shape shape;
  int64_t row_bytes = 0;
  bool open = false;  // dispatched and not combined yet
  int64_t routing_id = -1;
  int64_t num_tokens = 0;
  const fabric::dispatch_output* out = nullptr;
  // The open step's top-k ids and weights: ep_group reads both until combine_recv, so they
  // live here rather than in the caller's tensors. The weights are not known at dispatch
  // (DeepEP's low-latency combine brings them); ep_group reads them only when it reduces
  // (combine_recv), and ll_combine fills them just before.
  std::vector<int64_t> idx;
  std::vector<float> weights;
  payload_scratch scratch;  // where a dropped combine lands
  // Where a replayed dispatch's rows land (only its routing matters), and an fp8 dispatch's
  // before they are quantised: [num_local_experts * num_ranks * max_tokens, hidden].
  payload_scratch recv_scratch;
  // Device channels (shape.memory cuda): the host copy of the received rows that fp8
  // quantises.
  std::vector<char> host_rows;
  fabric::memory_kind memory() const { return payload_kind(shape.memory); }
};

}  // namespace moerl::py
