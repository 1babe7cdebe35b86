// The inside of an ep_group, shared by the group (fabric/ep_group.cpp) and its three modes
// (fabric/ep_mode_*.cpp). Private to fabric/: nobody outside includes it.
//
// The group owns the buffers, the bootstrap, the count exchange and the waits; each mode is
// one table of operations (ep_mode_ops) that the group calls at fixed points of every phase,
// the way libfabric's EFA provider keeps one file per protocol and NCCL one ncclTransport
// per transport. fabric/PROTOCOL.md has the buffer layouts and the phases.
#pragma once

#if !defined(MOERL_INSIDE_moerl_fabric)
#error \
    "fabric/internal/ep_group_impl.h is private to moerl_fabric (fabric/): include its public headers"
#endif

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fabric/device_memory.h"
#include "fabric/ep_group.h"
#include "fabric/ep_protocol.h"
#include "fabric/internal/ep_payload.h"
#include "kernels/thread_pool.h"

namespace moerl::fabric::detail {

// A registered buffer: a region the transport allocated and owns (transport::allocate_region),
// shared with same-host peers. Once a group is destroyed its transport unmaps the regions, so
// a late write from a peer of the old group faults at the writer instead of landing in
// memory the process reuses.
struct buffer {
  local_region reg;
  char* data() const { return static_cast<char*>(reg.ptr); }
};

struct peer_regions {
  remote_region ctrl, dispatch, combine;
  // normal mode's expert-major dispatch output (same host only; payload memory when split)
  remote_region output;
  // low-latency's dispatch_buffer() and combine_buffer(), read in place (same host only)
  remote_region shared_inputs;
  // The split layout (ep_memory cuda, host_split; ll and normal): the payload rows of the
  // dispatch receive region, and (ll) of dispatch_buffer() and combine_buffer() (dispatch and
  // shared_inputs then hold the metadata only; combine holds payload in both layouts).
  remote_region dispatch_payload, shared_payload;
};

// Where the group is in the dispatch_send, dispatch_recv, combine_send, combine_recv cycle.
enum class ep_phase { idle, dispatch_sent, dispatched, combine_sent };

// Bytes of the registered regions a mode needs (PROTOCOL.md, "Buffers").
struct ep_region_sizes {
  int64_t dispatch_recv = 0, dispatch_send = 0, combine_recv = 0, combine_send = 0;
  // Normal mode, one node: the expert-major dispatch output, shared with same-host peers
  // that store their rows' payload straight into it (0: the output is private memory).
  int64_t dispatch_output = 0;
  // Low-latency: dispatch_buffer(), combine_buffer() and what same-host peers need to read
  // them in place (0: no such region, both buffers are private memory).
  int64_t shared_inputs = 0;
  // The split layout only (0 otherwise), in the payload memory: the dispatch receive rows'
  // payload, the send staging of payload rows for peers not mapped here (and combine's
  // partials), the payload of (ll) dispatch_buffer() and combine_buffer(), and the step's
  // output rows when nobody stores into them in place. The combine receive region is then
  // payload memory too, and so is normal mode's dispatch_output.
  int64_t dispatch_payload = 0, payload_staging = 0, shared_payload = 0, output_payload = 0;
};

// The terms of combine_recv's final reduction: y[t] = sum_j weight[t, j] *
// combine_recv_region[slot[t, j]] (kernels::combine_forward; slot -1 = no term).
struct combine_terms {
  std::vector<int64_t> slot;  // [num_tokens, width] row of the combine receive region
  std::vector<float> ones;    // weights when every term has weight 1 (normal's partials)
  // When not empty, the terms as row pointers instead ([num_tokens, width], nullptr = no term):
  // low-latency terms read in place from same-host peers' combine_buffer().
  std::vector<const char*> rows;
  const float* weight = nullptr;  // [num_tokens, width]
  int width = 0;
  int64_t num_region_rows = 0;  // rows of the combine receive region slot may name
};

struct ep_group_impl;

// One EP mode: what it does at each point of a step that differs between modes. The group
// validates every call, runs the layout, the count exchange and the waits; between those it
// calls these, in this order. Every operation that writes records its bytes in step_bytes.
struct ep_mode_ops {
  // Sets the mode's geometry (row_bytes, max_rows_per_peer, max_recv_rows_per_source,
  // count_record_bytes and the node layout) and returns the sizes of its regions. Runs once,
  // before any buffer exists.
  ep_region_sizes (*regions_plan)(ep_group_impl& g);
  // dispatch_send, before the count records: numbers the rows for each destination
  // (num_rows_to), packs them into staging and sets in_place_to. is_token_in_rank is
  // [num_tokens, num_ranks].
  status (*dispatch_pack)(ep_group_impl& g, const uint8_t* is_token_in_rank);
  // dispatch_send, after the count records: writes that need not wait for the peers.
  status (*dispatch_eager_write)(ep_group_impl& g);
  // dispatch_recv, once every count record arrived: the bulk writes, and how many dispatch
  // immediates to expect from each source (expected[source], zeroed by the caller).
  status (*dispatch_bulk_write)(ep_group_impl& g, std::vector<int64_t>& expected);
  // dispatch_recv, once the data arrived: fills g.output (through start_output).
  status (*dispatch_output_build)(ep_group_impl& g);
  // combine_send: returns the expert outputs (rows in dispatch_recv's order) to the sources.
  status (*combine_write)(ep_group_impl& g, const char* expert_out);
  // combine_recv: how many combine immediates to expect from each destination of dispatch.
  void (*combine_completions_expect)(const ep_group_impl& g, std::vector<int64_t>& expected);
  // combine_recv, once the data arrived: the terms of the final reduction (an error: a peer
  // broke the protocol).
  status (*combine_terms_build)(ep_group_impl& g, combine_terms& terms);
};

extern const ep_mode_ops normal_mode_ops;
extern const ep_mode_ops low_latency_mode_ops;
extern const ep_mode_ops baseline_mode_ops;

struct ep_group_impl {
  ep_config cfg;
  const ep_mode_ops* ops = nullptr;
  int rank = 0, num_ranks = 0, num_local_experts = 0;
  int64_t hidden_bytes = 0;
  int64_t row_bytes = 0;  // a dispatch row: hidden payload, then the mode's metadata, padded
  // The split layout's metadata row (the mode's regions_plan sets it; ll: an entry_meta).
  int64_t split_meta_bytes = sizeof(proto::entry_meta);
  // low_latency and baseline: rows a rank may receive from one peer per step (`cap` in
  // PROTOCOL.md).
  int64_t max_rows_per_peer = 0;
  // The most rows a count record may announce (normal: tokens; others: entries).
  int64_t max_recv_rows_per_source = 0;
  // Stride of count records in the ctrl regions: a proto::count_record, plus (normal mode)
  // uint32 entries per global expert.
  int64_t count_record_bytes = sizeof(proto::count_record);
  // normal mode across nodes: ranks per node, nodes, and rows a rank can receive from one
  // gateway of its node per step (F in PROTOCOL.md); across_nodes when there is more than
  // one node.
  int num_ranks_per_node = 1, num_nodes = 1;
  int64_t max_forwarded_rows_per_gateway = 0;
  bool across_nodes = false;
  int node_of(int r) const { return r / num_ranks_per_node; }
  int local_of(int r) const { return r % num_ranks_per_node; }
  int gateway_of(int node) const { return node * num_ranks_per_node + local_of(rank); }
  std::vector<peer_regions> peers;
  buffer ctrl_recv, ctrl_send, dispatch_recv_region, staging, combine_recv_region;
  // Normal mode: the expert-major dispatch output when the transport shares memory with
  // peers (reg.ptr null otherwise: output_x holds it).
  buffer output_region;
  // Low-latency: dispatch_buffer() and combine_buffer() in shared memory (reg.ptr null when
  // the transport shares none: the private vectors hold them), at these offsets.
  buffer shared_inputs_region;
  int64_t combine_rows_offset = 0, dispatch_rows_offset = 0;
  // The split layout (ep_region_sizes' payload regions; reg.ptr null otherwise).
  // shared_payload holds (ll) combine_buffer() and dispatch_buffer() at the offsets above.
  buffer dispatch_payload_region, payload_staging, shared_payload_region, output_payload_region;
  // Moves payload rows and reduces combine where the rows are (every mode has one; the split
  // layout of ll and normal queues plans).
  std::unique_ptr<ep_payload> payload;
  bool split() const { return payload && payload->split(); }
  // Rows of the dispatch receive region (and of send staging): the mode's metadata of row r
  // at r * meta_stride() + meta_offset(), its payload at r * payload_stride() of the payload
  // rows (the same region when not split).
  int64_t meta_stride() const { return split() ? split_meta_bytes : row_bytes; }
  int64_t meta_offset() const { return split() ? 0 : hidden_bytes; }
  int64_t payload_stride() const { return split() ? hidden_bytes : row_bytes; }
  char* dispatch_payload_rows() {
    return split() ? dispatch_payload_region.data() : dispatch_recv_region.data();
  }
  // Where payload rows for peers not mapped here are staged before write().
  char* payload_staging_rows() { return split() ? payload_staging.data() : staging.data(); }
  // This step's output rows (recv_x): the caller's (set_recv_rows), normal's shared output region
  // (payload memory when split), or the split layout's private output, or private host memory.
  // With ep_config::output_slots, slot output_slot of the shared region (or of output_x).
  char* output_rows() {
    if (recv_rows) return recv_rows;
    return output_region.reg.ptr ? output_region.data() + output_slot * output_slot_bytes
           : split()             ? output_payload_region.data()
                                 : output_x[static_cast<size_t>(output_slot)].data();
  }
  // The base that combine_rows_offset and dispatch_rows_offset index: of ours, and of peer s's
  // as addressable here (its host mapping, or its device region through CUDA IPC; nullptr: a
  // network peer, or nothing shared).
  char* inputs_rows() {
    return split() ? shared_payload_region.data() : shared_inputs_region.data();
  }
  result<char*> peer_inputs_rows(int s) {
    if (!split()) return peer_shared_inputs(s);
    const remote_region& r = peers[s].shared_payload;
    return peer_payload(s, r, 0, static_cast<int64_t>(r.size));
  }
  std::vector<char> combine_private, dispatch_private;
  // Where bytes of peer s's shared inputs region are mapped here, or nullptr (a network peer,
  // or no such region).
  char* peer_shared_inputs(int s) {
    const remote_region& r = peers[s].shared_inputs;
    return r.size > 0 ? peer_memory(s, r, 0, static_cast<int64_t>(r.size)) : nullptr;
  }
  // Owns the buffers' memory.
  std::unique_ptr<transport> endpoint;
  std::shared_ptr<const std::atomic<bool>> abort;  // transport_options::abort
  kernels::thread_pool pool{1};

  uint32_t seq = 0;
  ep_phase phase = ep_phase::idle;
  int64_t deadline = 0;
  error broken;
  bool is_broken = false;
  // imm_counters[step % 16][kind][forwarded][src]: immediates received, reset when their
  // step completes.
  std::vector<uint32_t> imm_counters;
  std::vector<uint32_t> imm_batch;  // one progress() call's immediates
  ep_step_bytes step_bytes;

  // The step's inputs and send-side layout.
  const void* x = nullptr;
  const int64_t* topk_idx = nullptr;
  const float* topk_weights = nullptr;
  int64_t num_tokens = 0;
  std::vector<int64_t> num_rows_to;         // [num_ranks] rows for each destination
  std::vector<int64_t> entries_per_expert;  // [num_experts] (token, k) entries per expert
  // normal: [num_ranks] destinations whose output we store our rows' payload into (count
  // record flag count_flag_in_place), and sources that stored theirs into ours.
  std::vector<char> in_place_to, in_place_from;
  std::vector<int64_t> token_rank_slot;  // [num_tokens, num_ranks] (dispatch layout)
  // normal: [num_tokens, num_ranks] row of the token at destination (a rank of our node, or
  // a gateway), -1 if none.
  std::vector<int64_t> dest_slot;
  // gateway: [num_ranks_per_node] rows forwarded to each rank of the node.
  std::vector<int64_t> num_forwarded_to;
  // [num_ranks_per_node] rows forwarded to us by each gateway of the node.
  std::vector<int64_t> num_forwarded_from;
  // gateway: [num_ranks * max_tokens, num_ranks_per_node] position of inter-node row (s, i)
  // in the stream forwarded to local rank l, -1 if none.
  std::vector<int64_t> gateway_slot;
  // ll, baseline: [num_tokens, topk] row index of the entry at its destination.
  std::vector<int64_t> entry_slot;
  std::vector<int64_t> num_rows_from;  // [num_ranks] rows from each source
  int64_t num_padded_rows = 0;         // baseline: the step's block size in rows
  // ll: [num_ranks] peers whose rows this phase were stored in place (mapped here).
  std::vector<char> direct_peers;

  // Receive-side handle for combine.
  dispatch_output output;
  // Private output rows per output slot (ep_config::output_slots) when nothing is shared.
  std::vector<std::vector<char>> output_x;
  // normal: the slot this step's output fills (select_output_slot), announced to the senders
  // in our count records; the bytes of one slot of output_region.
  int output_slot = 0;
  int64_t output_slot_bytes = 0;
  // normal: [receive-region row, topk] output row of each entry, and its weight.
  std::vector<int64_t> recv_slot;
  std::vector<float> recv_weight;
  // Per output row: normal, its receive-region row; ll/baseline, its index inside its
  // source's block.
  std::vector<int64_t> output_recv_pos;
  // ll, baseline: per output row, its row in recv_x and expert_out (r itself unless
  // ll_expert_stride sets the block layout; dispatch_output::expert_stride).
  std::vector<int64_t> output_pos;
  // ll_expert_stride > 0: the caller's rows for recv_x (set_recv_rows).
  char* recv_rows = nullptr;

  // ll_expert_stride, or 0 (compact rows).
  int64_t expert_stride() const { return cfg.ll_expert_stride; }
  // Rows combine_buffer() holds: every expert's block (ll_expert_stride), or at least this
  // step's rows.
  int64_t combine_buffer_rows(int64_t step_rows) const {
    return expert_stride() > 0 ? num_local_experts * expert_stride()
                               : std::max<int64_t>(step_rows, 1);
  }

  // The local index of global expert e, or -1 when another rank holds it.
  int64_t local_expert(int64_t e) const {
    const int64_t first = static_cast<int64_t>(rank) * num_local_experts;
    return e >= first && e < first + num_local_experts ? e - first : -1;
  }
  // Turns rows per local expert (per_expert[1 + j]) into offsets and sizes the step's output
  // for that many rows. Every mode's receive path starts here.
  void start_output(std::vector<int64_t>& per_expert);
  // The step's output is complete: the next call is combine_send.
  const dispatch_output* finish_output();

  // This step's count record from source s (valid once the count exchange completed), and
  // normal mode's entries per global expert that follow it.
  const proto::count_record& record_from(int s) const {
    return *reinterpret_cast<const proto::count_record*>(
        ctrl_recv.data() + ((seq & 1) * num_ranks + s) * count_record_bytes);
  }
  const uint32_t* entries_from(int s) const {
    return reinterpret_cast<const uint32_t*>(&record_from(s) + 1);
  }

  uint32_t& counter(uint32_t step, uint32_t kind, int src, uint32_t fwd = 0) {
    return imm_counters[(((step % proto::step_slots) * 3 + kind) * 2 + fwd) * num_ranks + src];
  }
  int64_t ll_writes(int64_t rows) const {
    return (rows + cfg.ll_entries_per_write - 1) / cfg.ll_entries_per_write;
  }
  // Low-latency dispatch immediates for rows: one per write, and the split layout writes each
  // batch of entries twice (its metadata rows, then its payload rows).
  int64_t ll_dispatch_writes(int64_t rows) const { return ll_writes(rows) * (split() ? 2 : 1); }
  int64_t chunks(int64_t num_bytes) const {
    const auto c = static_cast<int64_t>(cfg.chunk_bytes);
    return num_bytes == 0 ? 0 : (num_bytes + c - 1) / c;
  }

  // Breaks the group with its first error and returns e.
  error fail(error e);
  status check_usable() const;
  status progress();
  // Progresses until counter(seq, kind, r, fwd) == expected[r] for every r and our own writes
  // completed locally. On the deadline: a timeout naming the ranks still missing.
  status wait_for(uint32_t kind, const std::vector<int64_t>& expected, const char* what,
                  uint32_t fwd = 0);
  // One write of len bytes from staging or ctrl_send, counted in wire/writes.
  status write(int peer, const char* src, int64_t len, const remote_region& dst, int64_t off,
               uint32_t kind, uint64_t& wire, uint64_t& writes, uint32_t fwd = 0);
  // Bulk data in chunks of cfg.chunk_bytes, each with its own immediate.
  status write_chunked(int peer, const char* src, int64_t len, const remote_region& dst,
                       int64_t off, uint32_t kind, uint64_t& wire, uint64_t& writes,
                       uint32_t fwd = 0);
  const local_region& staging_or_ctrl(const char* p) const;
  // Where bytes [off, off+len) of peer's region are mapped here (same process or same host),
  // or nullptr: then the bytes go through staging and write().
  char* peer_memory(int peer, const remote_region& dst, int64_t off, int64_t len) {
    return endpoint->mapped(peer, dst, static_cast<uint64_t>(off), static_cast<size_t>(len));
  }
  // peer_memory for regions of either memory kind: a device region of a same-host peer is
  // reached through its CUDA IPC mapping (payload rows only: for device copies, never CPU
  // stores). An error: the IPC handle could not be opened.
  result<char*> peer_payload(int peer, const remote_region& dst, int64_t off, int64_t len) {
    if (dst.memory == static_cast<uint8_t>(memory_kind::cuda))
      return endpoint->device_mapped(peer, dst, static_cast<uint64_t>(off),
                                     static_cast<size_t>(len));
    return peer_memory(peer, dst, off, len);
  }
  // For len bytes already stored through peer_memory: the immediates the receiver counts for
  // them, num_writes of them (as many as write()/write_chunked() would have sent).
  status notify(int peer, int64_t len, int64_t num_writes, uint32_t kind, uint64_t& wire,
                uint64_t& writes, uint32_t fwd = 0);

  status dispatch_send(const void* x_in, const int64_t* idx, const float* weights,
                       int64_t num_tokens_in);
  result<const dispatch_output*> dispatch_recv();
  void* dispatch_buffer();
  void* combine_buffer();
  char* private_payload_rows(int which, int64_t bytes);
  status combine_send(const dispatch_output& handle, const void* expert_out);
  status combine_recv(void* y);
};

// The two per-entry modes (low_latency, baseline) move one row per (token, expert) entry
// and share these (fabric/ep_mode_entries.cpp).
ep_region_sizes entry_regions_plan(ep_group_impl& g, int64_t num_dispatch_recv_halves);
// The dispatch_pack of both (routing alone decides the entries; is_token_in_rank is unused):
// numbers the entries per destination and packs them into staging.
status entry_rows_pack(ep_group_impl& g, const uint8_t* is_token_in_rank);
// The same, except that a destination whose dispatch region is mapped here gets its rows
// packed straight into our block of it, from row direct_first_row + rank * max_rows_per_peer
// (low-latency's slots, which need no wait for the peer); direct[d] says which did. With
// meta_only, those get only the metadata part of each row (they read the payload from our
// tokens in place).
status entry_rows_pack_direct(ep_group_impl& g, int64_t direct_first_row, std::vector<char>& direct,
                              bool meta_only = false);
// Entries in (source, slot) order, which is (source, token, k) order, grouped by local
// expert; source s's block starts at row first_row + s * max_rows_per_peer.
// Sources with x_of_source[s] set sent only the metadata rows and their tokens are read in
// place there (row = token); the others' payload is in their slots.
status entry_output_build(ep_group_impl& g, int64_t first_row,
                          const std::vector<const char*>* x_of_source = nullptr);
// Copies each expert output row into staging at the slot its entry came from at its source;
// with `direct`, sources whose combine region is mapped here get it there instead
// (direct[s] says which did), or, with skip_direct, nothing (they read the rows in place).
// An error: a same-host peer's device region could not be opened.
status entry_outputs_stage(ep_group_impl& g, const char* expert_out,
                           std::vector<char>* direct = nullptr, bool skip_direct = false);
status entry_combine_terms_build(ep_group_impl& g, combine_terms& terms);

}  // namespace moerl::fabric::detail
