// Expert-parallel dispatch/combine over libfabric, in the spirit of DeepEP's Buffer.
//
// A group is num_ranks ranks; expert e lives on rank e / (num_experts / num_ranks). Each
// dispatch sends every token to the ranks holding its top-k experts and returns, on every
// rank, the rows it received in expert-major order; combine sends expert outputs back and
// reduces them with the routing weights. Three modes move the same data differently
// (fabric/PROTOCOL.md has the buffer layouts, phases and the immediate-data layout):
//   normal      — one row per (token, destination rank), with a count exchange first;
//                 combine reduces on the expert's rank and returns one partial per rank;
//   low_latency — one direct write per (token, expert) into pre-registered, double-
//                 buffered receive slots, no wait for the peers before writing;
//   baseline    — a generic padded all-to-all: one row per (token, expert), and every rank
//                 writes a block padded to the largest block of the step to every rank.
// Completion is only ever decided by counting remote-CQ-data completions; no mode assumes
// delivery order.
//
// Threading: one thread per rank calls into its group. Calls alternate
// dispatch_send, dispatch_recv, combine_send, combine_recv (or the fused dispatch/combine).
// Any failure (timeout, dead peer) breaks the group: later calls fail with the first error,
// and a new group is built with the survivors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "fabric/bootstrap.h"
#include "fabric/transport.h"

namespace moerl::fabric {

namespace detail {
struct ep_group_impl;  // fabric/internal/ep_group_impl.h, private to fabric/
}

enum class ep_mode { normal, low_latency, baseline };
enum class ep_dtype { bf16, fp32 };

// Where the low_latency and normal modes keep the payload rows of their regions
// (fabric/DEVICE_MEMORY.md).
enum class ep_memory {
  // One host region per buffer, each row's metadata beside its payload (PROTOCOL.md). The
  // default, and the only memory of baseline mode.
  host,
  // The payload rows (receive rows, send staging, combine rows, the output,
  // dispatch_buffer() and combine_buffer()) in device memory
  // (transport::allocate_device_region), the metadata in host regions; rows move by batched
  // device copies, same-host peers' regions through CUDA IPC.
  // Every payload pointer of the calls (x, recv_x, expert_out, y) is then a device pointer;
  // topk_idx and topk_weights stay host memory. The group copies on a stream of its own and
  // returns once its copies and its reduction are complete; it does not wait for other
  // streams, so the caller's kernels that write x or expert_out must be complete before the
  // call. Needs a CUDA build, a device, and peers on this host or behind a provider with
  // FI_HMEM (tcp is refused: stage through host memory).
  cuda,
  // cuda's split layout and batched copies on host memory: the device path with memcpy
  // for the kernels, so that a machine without a GPU runs (and tests) its logic.
  host_split,
};

const char* ep_mode_name(ep_mode m);      // "normal", "ll", "baseline"
const char* ep_memory_name(ep_memory m);  // "host", "cuda", "host_split"
result<ep_mode> parse_ep_mode(const std::string& name);
size_t ep_dtype_size(ep_dtype d);

struct ep_config {
  ep_mode mode = ep_mode::normal;
  int num_experts = 0;  // divisible by the number of ranks
  int64_t hidden = 0;   // elements per token row
  int topk = 0;
  int64_t max_tokens_per_rank = 0;  // upper bound on num_tokens of any dispatch
  ep_dtype dtype = ep_dtype::bf16;
  // low_latency and baseline: (token, expert) entries a rank can receive from one peer per
  // step. 0: the worst case, max_tokens_per_rank * min(topk, experts per rank); a caller
  // that knows its routing bound (the benchmark does) saves memory with a smaller value.
  int64_t rows_per_peer = 0;
  size_t chunk_bytes = 1 << 20;  // normal/baseline bulk writes are cut into chunks of this
  // low_latency only: how many adjacent receive slots (entries bound for one rank) one
  // write may fill. 1 is DeepEP's one write per (token, expert).
  int64_t ll_entries_per_write = 1;
  // normal only: ranks per node (0: all ranks are one node). Across nodes a token crosses
  // to each destination node once, to the rank there with the sender's local index,
  // which forwards it to the node's ranks that need it (and reduces on the way back).
  int ranks_per_node = 0;
  // low_latency only: where the payload rows live (ep_memory above).
  ep_memory memory = ep_memory::host;
  // normal mode, host memory only: how many step outputs the group keeps. Each dispatch_send
  // fills the slot named by select_output_slot() (0 until called) and leaves the others'
  // rows as they were, so a caller can keep reading an earlier step's recv_x while later
  // steps run, as long as it names another slot for them (moerl.ep hands recv_x out as a
  // view of a slot instead of copying it; python/README.md). Same-host senders store into
  // the slot the receiver announced in its count record (PROTOCOL.md, "Rows in place").
  int output_slots = 1;
  // low_latency only: 0 keeps the received rows compact (dispatch_output::recv_x
  // [num_recv_rows, hidden]). S > 0 lays recv_x, combine_buffer() and combine_send's
  // expert_out out as DeepEP's low-latency kernels do: num_local_experts blocks of S rows,
  // local expert j's i-th row at j * S + i, rows past its count untouched. Then the caller
  // names where each dispatch_recv puts the rows (set_recv_rows), so that DeepEP's layout
  // costs no copy. A local expert sent more than S rows in a step keeps its first S (the rest
  // are dropped, their combine terms unspecified); expert_offset still counts them, so the
  // caller sees it (a token that names one expert twice can do that when S is
  // num_ranks * max_tokens_per_rank, DeepEP's block).
  int64_t ll_expert_stride = 0;
  int64_t op_timeout_ms = 10000;  // a step not complete within this fails
};

// Takes fabric.op_timeout_ms from the node's configuration.
void apply_config(const config& node_config, ep_config& cfg);

// What dispatch_recv returns; valid until the next dispatch_send on this group (normal mode
// on one host: peers store the next step's rows straight into recv_x once that call
// announced this rank is in the next step), except recv_x's rows with
// ep_config::output_slots: those stay until a later step fills the same slot.
struct dispatch_output {
  uint32_t seq = 0;              // step number, checked by combine
  const void* recv_x = nullptr;  // [num_recv_rows, hidden] of dtype, expert-major
  int64_t num_recv_rows = 0;
  // [num_local_experts + 1]: local expert j's rows are [expert_offset[j], expert_offset[j+1]).
  // Inside one expert rows are ordered by (source rank, source token, k): the same in
  // every mode.
  std::vector<int64_t> expert_offset;
  // Per received row: where it came from (attribution, and the way back for combine).
  std::vector<int32_t> src_rank, src_token, src_k;
  // ep_config::ll_expert_stride: 0, or the block stride of recv_x, combine_buffer() and
  // expert_out, in rows: row r of local expert j is then at j * expert_stride + (r -
  // expert_offset[j]) (while r - expert_offset[j] < expert_stride). The tables above stay
  // indexed by r.
  int64_t expert_stride = 0;
};

// Bytes this rank posted to the fabric in the last step, split by phase.
struct ep_step_bytes {
  uint64_t dispatch_wire = 0;  // every byte written in dispatch (counts, metadata, padding)
  uint64_t combine_wire = 0;
  uint64_t dispatch_writes = 0;
  uint64_t combine_writes = 0;
  // normal mode: destinations whose expert-major output received our rows' payload in place
  // (same host, one node; PROTOCOL.md "Rows in place"); low_latency: destinations that read
  // our tokens in place from dispatch_buffer() (PROTOCOL.md "Reading in place").
  uint64_t dispatch_in_place_peers = 0;
  // low_latency mode: sources that read our expert outputs in place from combine_buffer()
  // (same host; PROTOCOL.md "Reading in place").
  uint64_t combine_in_place_peers = 0;
};

class ep_group {
 public:
  // Collective over `members` (launcher ranks, sorted): opens an endpoint, registers the
  // mode's buffers and exchanges addresses and keys through `boot`. This rank's index in
  // the group is its position in `members`.
  static result<std::unique_ptr<ep_group>> create(const transport_options& topt, bootstrap& boot,
                                                  const std::vector<int>& members,
                                                  const ep_config& cfg);
  ~ep_group();

  int rank() const;
  int num_ranks() const;
  int num_local_experts() const;
  const ep_config& config() const;
  const transport_description& describe() const;

  // ep_config::ll_expert_stride > 0 only (an error otherwise): where the following
  // dispatch_recv calls put the received rows, [num_local_experts * ll_expert_stride, hidden] of
  // dtype in the payload memory (device memory with ep_memory::cuda), until set again; the
  // caller owns it, and the group writes it during dispatch_recv only. dispatch_send refuses to
  // start a step with none set (the group keeps no output of its own in that layout).
  status set_recv_rows(void* rows);

  // Where the caller may put the next step's tokens ([max_tokens_per_rank, hidden] of dtype;
  // device memory with ep_memory::cuda, as are combine_buffer() and dispatch_output::recv_x)
  // to pass them as dispatch_send's x, valid from the previous step's combine_recv until the
  // next combine_recv; nullptr between dispatch_send and combine_recv. In low_latency mode it
  // is shared memory and same-host destinations read the tokens there in place instead of
  // getting a copy of each entry. Any other x works too, in every mode.
  void* dispatch_buffer();
  // ep_config::output_slots: the slot the next dispatch_send fills (0 <= slot < output_slots;
  // an error otherwise, or during a step). Kept until called again.
  status select_output_slot(int slot);
  // ep_config::output_slots: where slot `slot` of the output region lies in its shared-memory
  // file (fd, offset and length page-aligned), for a caller that maps it a second time to
  // keep a step's rows readable after the group is gone (the file lives while any mapping
  // does). fd -1: the output is private memory (no same-host peer shares this group's
  // memory) or the slot does not exist. The fd is the group's: map it, do not close it.
  struct slot_file {
    int fd = -1;
    int64_t offset = 0;
    int64_t bytes = 0;
  };
  slot_file output_slot_file(int slot) const;
  // x [num_tokens, hidden] of dtype; topk_idx [num_tokens, topk], -1 = masked;
  // topk_weights [num_tokens, topk]. The inputs must stay unchanged until combine_recv.
  status dispatch_send(const void* x, const int64_t* topk_idx, const float* topk_weights,
                       int64_t num_tokens);
  result<const dispatch_output*> dispatch_recv();
  result<const dispatch_output*> dispatch(const void* x, const int64_t* topk_idx,
                                          const float* topk_weights, int64_t num_tokens);

  // Where an expert may write its outputs for this step's combine ([num_recv_rows, hidden] of
  // dtype, in dispatch_recv's order; with ll_expert_stride, recv_x's block layout), valid from
  // dispatch_recv until the next dispatch_send; nullptr before the step's dispatch_recv. Passing it
  // as combine_send's expert_out saves a copy: in low_latency mode it is shared memory, and
  // same-host sources read their rows in place instead of getting a copy of each (DeepEP's
  // zero-copy low-latency combine). Any other expert_out works too, in every mode.
  void* combine_buffer();
  // expert_out [num_recv_rows, hidden] of dtype, in dispatch_recv's order (with
  // ll_expert_stride, recv_x's block layout); read during the call only, unless it is
  // combine_buffer() (low_latency's same-host peers read that in place until their combine_recv).
  status combine_send(const dispatch_output& handle, const void* expert_out);
  // y [num_tokens, hidden] of dtype: y[t] = sum_k w[t,k] * expert_out(t,k); the exact
  // summation order per mode is in PROTOCOL.md (fixed, so results are bitwise reproducible).
  status combine_recv(void* y);
  status combine(const dispatch_output& handle, const void* expert_out, void* y);

  const ep_step_bytes& last_step_bytes() const;

 private:
  explicit ep_group(std::unique_ptr<detail::ep_group_impl> impl);
  std::unique_ptr<detail::ep_group_impl> impl_;
};

}  // namespace moerl::fabric
