// The device policy's expert exchange (policy/expert_exchange.h's contract, the same row order,
// handle and collective pairing) over device buffers: the MoE layer of a device policy whose
// experts are split over several ranks hands it device pointers and gets device rows back.
//
// Two implementations meet here:
//   - make_host_staged_exchange (below, the interim path, what runs today): a host
//     policy::expert_exchange (job/'s fabric_expert_exchange over the host-memory expert plane)
//     with explicit staging: every operation copies its device inputs to the host
//     (cudaMemcpy device->host, one stream synchronisation), runs the host exchange, and copies
//     its outputs back (host->device). Per MoE layer and forward: x, topk_idx and topk_weights
//     down, recv_x up, recv_out down, y up; backward the same four ways for the gradients.
//   - The expert plane on device memory (fabric/, issue 29: CUDA IPC between ranks on one
//     host, FI_HMEM-registered device memory across hosts) implements this interface directly
//     and moves device rows with no host copy. It plugs in at ONE place:
//     job/ep_device_rank.cpp's make_rank_device_exchange, which picks the implementation for a
//     rank of an expert-parallel group.
//
// Threading: one thread per rank drives its exchange; `stream` is the caller's (the device
// policy's): an implementation orders its work after what the stream has queued and leaves
// its outputs ready for what the stream runs next.
// Built only when MOERL_HAVE_CUDA (library moerl_policy_cuda).
#pragma once

#include <cstdint>
#include <memory>

#include "common/error.h"
#include "policy/cuda/device_buffer.h"
#include "policy/expert_exchange.h"

namespace moerl::policy::cuda {

class device_expert_exchange {
 public:
  virtual ~device_expert_exchange() = default;
  virtual int rank() const = 0;
  virtual int num_ranks() const = 0;

  // As expert_exchange::dispatch; x, topk_idx, topk_weights and recv_x are device memory,
  // recv_x resized to [handle.num_recv_rows, hidden]. The handle's vectors are host memory
  // (local_expert_offset sizes the expert GEMMs on the host, as in moe_layer_cuda.h).
  virtual result<exchange_handle> dispatch(cudaStream_t stream, const float* x,
                                           const int64_t* topk_idx, const float* topk_weights,
                                           int64_t num_tokens, int top_k, int num_experts,
                                           int64_t hidden, exchange_mode mode,
                                           device_buffer<float>* recv_x) = 0;
  // As expert_exchange::combine; expert_out and y [h.num_tokens, hidden] device memory.
  virtual status combine(cudaStream_t stream, const exchange_handle& h, const float* expert_out,
                         int64_t hidden, exchange_mode mode, float* y) = 0;
  // As expert_exchange::dispatch_cached; x and recv_x device memory.
  virtual status dispatch_cached(cudaStream_t stream, const exchange_handle& h, const float* x,
                                 int64_t hidden, exchange_mode mode,
                                 device_buffer<float>* recv_x) = 0;
  // As expert_exchange::dispatch_backward; every pointer device memory.
  virtual status dispatch_backward(cudaStream_t stream, const exchange_handle& h,
                                   const float* grad_recv_x, const float* grad_recv_weights,
                                   int64_t hidden, exchange_mode mode, float* grad_x,
                                   float* grad_topk_weights) = 0;
};

// The interim path (above): `host` must outlive the result and be driven only through it.
std::unique_ptr<device_expert_exchange> make_host_staged_exchange(expert_exchange& host);

}  // namespace moerl::policy::cuda
