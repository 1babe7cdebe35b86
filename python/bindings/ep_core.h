// The C++ side of moerl.ep.Buffer (python/moerl/ep.py): DeepEP's normal-mode dispatch and
// combine, built on fabric::ep_group. Plain C++ (no pybind11, no torch): the binding
// (python/bindings/module.cpp) hands it raw pointers that torch tensors own.
//
// The mapping onto ep_group (python/README.md, "How dispatch maps onto the expert plane"):
// DeepEP sends one row per (token, destination rank) and returns the rows grouped by source
// rank, in token order; its combine is an unweighted sum of the rows each rank returns. An
// ep_group whose experts are the ranks themselves (num_experts = topk = num_ranks, routing
// entry r = rank r when the token goes there, else -1, weight 1) moves exactly that: its
// expert-major output for the single local expert is ordered by (source rank, source token),
// and its combine is a sum with weight 1 (exact) accumulated in fp32 and rounded once. The
// top-k ids and weights travel in a second group of the same shape (rows of 3K fp32 words:
// the K int64 ids as raw bytes, then the K weights), so x itself is read in place.
//
// ep_group wants dispatch and combine to alternate on each group; DeepEP does not (cached
// dispatch after dispatch, combine with an older handle). So every group ("channel") remembers
// which routing its open step carries: a dispatch on an open channel first closes the step
// with a combine whose result is dropped, and a combine whose handle is not the channel's
// open routing first replays that routing (a dispatch of zeros). All ranks call the same
// sequence, so all make the same choices.
//
// CUDA tensors (fabric/DEVICE_MEMORY.md): an x channel may keep its payload rows in device
// memory (`memory` cuda): then x, recv_x, combine's x and y are device pointers, and the
// routing (is_token_in_rank, the top-k channel's ids and weights, src_rank, src_token) stays
// host memory, because the group plans on the CPU.
//
// Threading: one thread at a time (the rank's Python thread, GIL released inside).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "common/error.h"
#include "fabric/ep_group.h"
#include "kernels/thread_pool.h"
#include "python/bindings/host_block_pool.h"

namespace moerl::py {

// Gathers one byte string from every rank of the group, in rank order (the Python side
// carries it over torch.distributed).
using allgather_fn = std::function<result<std::vector<std::string>>(const std::string&)>;

struct ep_core_options {
  int rank = 0;
  int num_ranks = 1;
  int64_t buffer_bytes = 0;  // num_nvl_bytes + num_rdma_bytes: sizes each channel
  int64_t op_timeout_ms = 10000;
  fabric::transport_options transport;
};

class ep_core {
 public:
  ep_core(ep_core_options opt, allgather_fn allgather);
  ~ep_core();

  // Tokens per rank one dispatch can carry for rows of `row_bytes` (0 when the buffer is 0).
  int64_t capacity(int64_t row_bytes) const;
  // The bytes a buffer needs so that `num_tokens` rows of `row_bytes` fit.
  int64_t bytes_needed(int64_t num_tokens, int64_t row_bytes) const;

  // DeepEP's get_dispatch_layout from kernels::get_dispatch_layout: per-rank and per-expert
  // counts as int32, is_token_in_rank [T, N] as bytes 0/1.
  status layout(const int64_t* topk_idx, int64_t num_tokens, int topk, int num_experts,
                int32_t* num_tokens_per_rank, int32_t* num_tokens_per_expert,
                uint8_t* is_token_in_rank);

  // Creates the x channel of (dtype, hidden, memory) now (collective): "" when it exists, else
  // why a device (memory cuda) channel was refused (a peer on another host behind a provider
  // without FI_HMEM: the caller stages through host memory instead). Other failures are errors.
  result<std::string> prepare(fabric::ep_dtype dtype, int64_t hidden, fabric::ep_memory memory);

  // Sends x [T, hidden] (dtype; payload memory of `memory`) to every rank r with
  // is_token_in_rank[t, r], and, when topk > 0, the rows' top-k ids and weights (host memory,
  // through a host channel). Returns the number of rows received; read them with
  // read_dispatch before the next call. routing_id names this routing for combine.
  result<int64_t> dispatch(const void* x, int64_t num_tokens, int64_t hidden,
                           fabric::ep_dtype dtype, const uint8_t* is_token_in_rank,
                           const int64_t* topk_idx, const float* topk_weights, int topk,
                           int64_t routing_id, fabric::ep_memory memory = fabric::ep_memory::host);

  // Copies the last dispatch's rows out: recv_x [R, hidden] (the dispatch's payload memory:
  // device memory for a cuda channel; nullptr: not copied, recv_view() showed them);
  // src_rank, src_token [R];
  // with top-k: recv_topk_idx [R, K] as local expert ids or -1, recv_topk_weights [R, K]
  // (0 where the id is -1), and per_local_expert[j] = rows naming local expert j.
  status read_dispatch(void* recv_x, int32_t* src_rank, int32_t* src_token, int64_t* recv_topk_idx,
                       float* recv_topk_weights, int num_experts,
                       std::vector<int64_t>& per_local_expert);
  // The last dispatch's received rows in place ([R, hidden] bytes of its output slot), for
  // recv_x to view instead of a copy: the slot stays the caller's until the block dies, and
  // later dispatches fill other slots. nullptr (copy with read_dispatch instead): a device
  // channel, no rows, or every other slot already held by a view (one stays free).
  std::unique_ptr<host_block> recv_view();
  // Output slots that recv_x views hold now, over every channel.
  int recv_views_held() const;

  // y[t] = sum of the rows x every rank returns for token t (routing `routing_id`, given
  // again as is_token_in_rank [T, N] in case it must be replayed), fp32 accumulation;
  // with topk_weights [R, K]: combined_weights[t] the same sum of the weights. x and y are
  // payload memory of `memory`; is_token_in_rank, topk_weights and combined_weights host.
  status combine(const void* x, int64_t num_rows, int64_t hidden, fabric::ep_dtype dtype,
                 const uint8_t* is_token_in_rank, int64_t num_tokens, int64_t routing_id, void* y,
                 const float* topk_weights, int topk, float* combined_weights,
                 fabric::ep_memory memory = fabric::ep_memory::host);

  // ---- low-latency mode (python/bindings/ep_core_ll.cpp) --------------------------------
  // DeepEP's low_latency_dispatch on an ep_group in fabric's low-latency mode (one row per
  // (token, expert), written straight into the destination's slots): x [T, hidden] with
  // topk_idx [T, K] (-1 masked), T <= max_tokens (DeepEP's num_max_dispatch_tokens_per_rank).
  // Fills DeepEP's packed layout, per local expert j: recv_x[j] [num_ranks * max_tokens,
  // hidden] with its rows first, grouped by source rank ascending (token order inside a
  // source), recv_count[j] rows, src_info[j][i] each row's source token, layout_range[j][s] =
  // (first row from source s) << 32 | rows from source s. Rows past recv_count are untouched.
  // The channel's group writes recv_x itself (ll_expert_stride, set_recv_rows) during the
  // call only.
  struct ll_shape {
    int64_t hidden = 0;
    fabric::ep_dtype dtype = fabric::ep_dtype::bf16;
    int64_t max_tokens = 0;
    int num_experts = 0;
    int topk = 0;
    // Where the channel's group keeps its payload rows (fabric/DEVICE_MEMORY.md). With cuda,
    // x, recv_x, the combine's x and y are device pointers; topk_idx, topk_weights and the
    // statistics stay host memory, and so do fp8's q and scales (quantised by the CPU twin
    // after one device-to-host copy of the rows). host_split runs cuda's path on host memory
    // (the tests' stand-in for a device).
    fabric::ep_memory memory = fabric::ep_memory::host;
  };
  // Creates the channel of `shape` now (collective): "" when it exists, else why a device
  // (memory cuda) channel was refused (a peer on another host behind a provider without FI_HMEM:
  // the caller stages through host memory instead). Other failures are errors.
  result<std::string> ll_prepare(const ll_shape& shape);
  // With fp8.q set (DeepEP's use_fp8), recv_x is not written: each valid row is quantised instead
  // (kernels::fp8_quantize, e4m3 with one fp32 scale per 128 channels) into q [L, N*M,
  // hidden] bytes and scales, stored column-major as DeepEP's: scale (j, row i, block b) at
  // scales[(j * num_blocks + b) * N*M + i]. The rows travel in x's dtype and are quantised on
  // receipt, which gives the same bits as quantising at the sender (a per-row function).
  struct ll_fp8_out {
    uint8_t* q = nullptr;
    float* scales = nullptr;
  };
  status ll_dispatch(const ll_shape& shape, const void* x, const int64_t* topk_idx,
                     int64_t num_tokens, int64_t routing_id, void* recv_x, int32_t* recv_count,
                     int32_t* src_info, int64_t* layout_range, ll_fp8_out fp8);
  // DeepEP's low_latency_combine: x in the packed layout above (the rows of the dispatch
  // named routing_id; topk_idx [T, K] is that dispatch's, given again in case the routing
  // must be replayed), y[t] = sum over k with topk_idx[t, k] >= 0 of topk_weights[t, k] *
  // (the expert's row of (t, k)), fp32 accumulation in k order, one rounding. x is read during
  // the call, except when it is ll_combine_buffer()'s memory: same-host peers read that in
  // place until their combine returns.
  status ll_combine(const ll_shape& shape, const void* x, const int64_t* topk_idx,
                    const float* topk_weights, int64_t num_tokens, int64_t routing_id, void* y);
  // The channel's combine_buffer() in the packed layout above ([L, N*M, hidden] of the shape's
  // dtype, host memory) while the dispatch named routing_id is the channel's open step, else
  // nullptr (no such channel, another step open, or a device channel). Expert outputs written
  // there before that dispatch's ll_combine need no copy on this rank, and same-host sources
  // read them in place. The memory lives as long as the channel (until close()); the group
  // never writes it, so it keeps what the caller wrote until the caller writes it again.
  void* ll_combine_buffer(const ll_shape& shape, int64_t routing_id);
  // The channel's dispatch_buffer() ([max_tokens, hidden] of the shape's dtype, host memory)
  // while no step of the channel is open, else nullptr (no such channel, a step open, or a
  // device channel). Tokens written there and passed as ll_dispatch's x are not copied:
  // same-host destinations read them there in place, as the C++ path's layer does with the
  // group's buffer. The caller must leave them unchanged until that step's ll_combine returns.
  // The memory lives as long as the channel (until close()).
  void* ll_dispatch_buffer(const ll_shape& shape);
  // Closes every open low-latency step (a dropped combine): collective, like DeepEP's.
  status ll_clean();

  // Frees every channel's fabric endpoints and regions now, whoever still holds this object
  // (a stored traceback's frame can keep the Python wrapper alive past the Buffer); later calls
  // that need a channel fail with "destroyed". Not collective.
  void close();

  // Per channel: its key and which transport each peer used.
  struct channel_info {
    std::string name;
    std::string provider;
    std::vector<std::string> peer_paths;         // empty when every peer goes through the fabric
    std::vector<std::string> peer_device_paths;  // transport_description's (CUDA builds)
    bool reorder_shim = false;
    std::string memory;  // where the group's payload rows live: fabric::ep_memory_name
  };
  std::vector<channel_info> describe() const;

  // Where the Python side allocates the large CPU tensors it returns (host_block_pool.h):
  // caches up to buffer_bytes of released blocks. Outlives close() while a block is alive.
  host_block_pool& blocks() { return *blocks_; }

 private:
  struct channel;
  struct ll_channel;
  // (dtype, hidden, max tokens, experts, topk, memory)
  using ll_key = std::tuple<int, int64_t, int64_t, int, int, int>;
  static ll_key ll_key_of(const ll_shape& shape);
  result<ll_channel*> ll_channel_for(const ll_shape& shape);
  // Rows per local expert block in DeepEP's layout: num_ranks * max_tokens.
  int64_t ll_block(const ll_shape& shape) const;
  // The channel's own [L * block, hidden] payload rows, where replayed and fp8 dispatches put
  // the received rows.
  result<void*> ll_recv_scratch(ll_channel& c);
  status ll_open_step(ll_channel& c, const int64_t* topk_idx, int64_t num_tokens,
                      int64_t routing_id, void* recv_rows);
  status ll_close_step(ll_channel& c);
  status ll_quantize(ll_channel& c, const fabric::dispatch_output& o, const char* rows, uint8_t* q,
                     float* scales);
  // (is metadata, dtype, row width in elements, memory)
  using channel_key = std::tuple<bool, int, int64_t, int>;
  result<channel*> channel_for(bool meta, fabric::ep_dtype dtype, int64_t width,
                               fabric::ep_memory memory = fabric::ep_memory::host);
  // For prepare and ll_prepare: a channel's creation error `e` as the refusal to hand back
  // (ep_group::create's refusal of device rows to a network peer without FI_HMEM: the same on
  // every rank, each having a peer on another host, so every rank falls back alike), or e.
  static result<std::string> device_refusal(const error& e, fabric::ep_memory memory);
  // Creates a group over every rank, bootstrapped through allgather_ (collective).
  result<std::unique_ptr<fabric::ep_group>> make_group(const fabric::ep_config& cfg);
  status open_step(channel& c, const void* x, const uint8_t* in_rank, int64_t num_tokens,
                   int64_t routing_id);
  status close_step(channel& c);
  status ensure_routing(channel& c, const uint8_t* in_rank, int64_t num_tokens, int64_t routing_id);

  ep_core_options opt_;
  allgather_fn allgather_;
  kernels::thread_pool pool_;
  std::shared_ptr<host_block_pool> blocks_;
  std::map<channel_key, std::unique_ptr<channel>> channels_;
  std::map<ll_key, std::unique_ptr<ll_channel>> ll_channels_;
  bool closed_ = false;
  channel* last_x_ = nullptr;
  channel* last_meta_ = nullptr;
  int last_topk_ = 0;
  std::vector<float> meta_rows_;
  std::vector<float> fp8_scales_;  // ll_quantize's scales per distinct row
};

}  // namespace moerl::py
