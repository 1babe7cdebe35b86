// The normal mode (high throughput; DeepEP normal, NCCL EP HT): one row per (token,
// destination rank) after a count exchange; combine reduces on the expert's rank and returns
// one partial per rank. Across nodes a token crosses to each node once, to a gateway that
// forwards it inside the node (PROTOCOL.md, "normal" and "normal across nodes").
//
// With ep_config::memory cuda (or its host twin host_split) the same protocol runs on the
// split layout (fabric/DEVICE_MEMORY.md): metadata rows in the host regions where the
// interleaved layout has whole rows, payload rows in regions of their own (device memory under
// cuda). This file reads only metadata on the CPU; every payload move of a phase goes into
// g.payload's plan, run once before the phase's immediates announce the rows, and every
// reduction runs through g.payload where the rows are.
#include <algorithm>
#include <cstring>

#include "common/status_try.h"
#include "fabric/internal/ep_group_impl.h"

namespace moerl::fabric::detail {

using proto::count_record;

namespace {

// Row metadata (proto::normal_meta_bytes): int32 token, int32 source rank,
// int32 topk_idx[topk], float topk_weight[topk].
int32_t meta_token(const char* meta) {
  int32_t token;
  std::memcpy(&token, meta, 4);
  return token;
}
int32_t meta_source(const char* meta) {
  int32_t source;
  std::memcpy(&source, meta + 4, 4);
  return source;
}
int32_t meta_expert(const char* meta, int k) {
  int32_t e;
  std::memcpy(&e, meta + 8 + 4 * k, 4);
  return e;
}

// Rows of the dispatch (and combine) regions: [num_ranks][max_tokens] direct (and, across
// nodes, inter-node) rows, then [num_ranks_per_node][F] forwarded rows.
int64_t num_region_rows(const ep_group_impl& g) {
  return g.num_ranks * g.cfg.max_tokens_per_rank +
         g.num_ranks_per_node * g.max_forwarded_rows_per_gateway;
}
// First row of the forwarded rows from (or to) local rank l.
int64_t forwarded_base(const ep_group_impl& g, int l) {
  return g.num_ranks * g.cfg.max_tokens_per_rank + l * g.max_forwarded_rows_per_gateway;
}

// kernels::combine_forward over rows of `in` (payload memory) of the group's dtype, into dst
// (payload memory); slot and weight are host arrays. Complete when it returns.
status reduce(ep_group_impl& g, const char* in, const int64_t* slot, const float* weight,
              int64_t num_rows, int width, int64_t num_in_rows, char* dst) {
  return g.payload->combine(g.cfg.dtype, in, slot, weight, num_rows, width, g.cfg.hidden,
                            num_in_rows, dst);
}

// One partial row per received token from the expert outputs into dst: reduce() with the
// token's slots and weights. When every row names exactly one term of weight 1 (moerl.ep's
// DeepEP-layout channels: one local expert per rank, weight 1), the partial is that expert
// row, copied in runs of adjacent rows instead of going through the fp32 reduction. The two
// differ only where rounding 0 + 1 * v changes v's bits (-0 becomes +0, a signalling NaN turns
// quiet); every reader of a partial adds it in fp32 to a sum that starts at +0
// (combine_recv, a gateway's forwarded sum), which maps v and its rounding to the same bits,
// so the caller's y is the same either way.
status partials_make(ep_group_impl& g, const char* expert_out, const int64_t* slot,
                     const float* weight, int64_t num_rows, int64_t num_out_rows, char* dst) {
  const int topk = g.cfg.topk;
  std::vector<int64_t> single(static_cast<size_t>(num_rows), -1);
  for (int64_t i = 0; i < num_rows; ++i) {
    int terms = 0;
    for (int k = 0; k < topk; ++k) {
      const int64_t r = slot[i * topk + k];
      if (r < 0) continue;
      ++terms;
      single[i] = weight[i * topk + k] == 1.0f && r < num_out_rows ? r : -1;
    }
    if (terms != 1 || single[i] < 0)
      return reduce(g, expert_out, slot, weight, num_rows, topk, num_out_rows, dst);
  }
  const int64_t hb = g.hidden_bytes;
  for (int64_t i = 0; i < num_rows;) {
    int64_t n = 1;
    while (i + n < num_rows && single[i + n] == single[i] + n) ++n;
    g.payload->add(dst + i * hb, expert_out + single[i] * hb, n * hb);
    i += n;
  }
  if (auto st = g.payload->run(); !st) return g.fail(st.err());
  return {};
}

// The metadata of row `row` of a region of dispatch rows (`base`: the receive region or send
// staging), and its payload (`payload_base`: the same region interleaved, the payload rows
// split).
char* meta_at(const ep_group_impl& g, char* base, int64_t row) {
  return base + row * g.meta_stride() + g.meta_offset();
}
char* payload_at(const ep_group_impl& g, char* payload_base, int64_t row) {
  return payload_base + row * g.payload_stride();
}

// Dispatch immediates for `rows` rows written as one stream: the chunks of the rows, or
// (split) the chunks of their metadata, then those of their payload.
int64_t dispatch_writes(const ep_group_impl& g, int64_t rows) {
  return g.split() ? g.chunks(rows * g.meta_stride()) + g.chunks(rows * g.hidden_bytes)
                   : g.chunks(rows * g.row_bytes);
}

// Rows [first, first + rows) of our send staging into d's dispatch region from row dst_row
// (payload plan already run): whole rows, or (split) the metadata rows, then the payload rows.
status rows_write(ep_group_impl& g, int d, int64_t first, int64_t rows, int64_t dst_row,
                  uint32_t fwd) {
  const int64_t meta = g.meta_stride();
  if (auto st = g.write_chunked(d, g.staging.data() + first * meta, rows * meta,
                                g.peers[d].dispatch, dst_row * meta, proto::imm_dispatch,
                                g.step_bytes.dispatch_wire, g.step_bytes.dispatch_writes, fwd);
      !st || !g.split())
    return st;
  return g.write_chunked(d, g.payload_staging.data() + first * g.hidden_bytes,
                         rows * g.hidden_bytes, g.peers[d].dispatch_payload,
                         dst_row * g.hidden_bytes, proto::imm_dispatch, g.step_bytes.dispatch_wire,
                         g.step_bytes.dispatch_writes, fwd);
}

// Source s's partials, staged in (payload) staging block s, into s's combine region at our
// block: in the order s sent the tokens.
status partials_return(ep_group_impl& g, int s) {
  const int64_t block_bytes = g.cfg.max_tokens_per_rank * g.hidden_bytes;
  return g.write_chunked(s, g.payload_staging_rows() + s * block_bytes,
                         g.num_rows_from[s] * g.hidden_bytes, g.peers[s].combine,
                         g.rank * block_bytes, proto::imm_combine, g.step_bytes.combine_wire,
                         g.step_bytes.combine_writes);
}

// The metadata of token tk's dispatch row, at `meta`.
void pack_meta(const ep_group_impl& g, int64_t tk, char* meta) {
  const int topk = g.cfg.topk;
  const int32_t token = static_cast<int32_t>(tk), source = g.rank;
  std::memcpy(meta, &token, 4);
  std::memcpy(meta + 4, &source, 4);
  for (int k = 0; k < topk; ++k) {
    const auto e = static_cast<int32_t>(g.topk_idx[tk * topk + k]);
    std::memcpy(meta + 8 + 4 * k, &e, 4);
  }
  std::memcpy(meta + 8 + 4 * topk, g.topk_weights + tk * topk, 4 * static_cast<size_t>(topk));
}

// One dispatch row of token tk: its metadata at `meta`, its payload to `payload` (now, or
// with the payload's plan).
void pack_row(ep_group_impl& g, int64_t tk, char* meta, char* payload) {
  g.payload->add(payload, static_cast<const char*>(g.x) + tk * g.hidden_bytes, g.hidden_bytes);
  pack_meta(g, tk, meta);
}

// Our block of d's dispatch receive region when it is mapped here (same process or host):
// the metadata of its rows and their payload (the same region interleaved; split, the payload
// region, a same-host peer's device region through CUDA IPC). Null when either is not.
struct dispatch_block {
  char* meta = nullptr;
  char* payload = nullptr;
};
result<dispatch_block> direct_dispatch_block(ep_group_impl& g, int d) {
  const int64_t rows = g.cfg.max_tokens_per_rank, first = g.rank * rows;
  dispatch_block b;
  b.meta = g.peer_memory(d, g.peers[d].dispatch, first * g.meta_stride(), rows * g.meta_stride());
  if (!b.meta || !g.split()) {
    b.payload = b.meta;
    return b;
  }
  auto p =
      g.peer_payload(d, g.peers[d].dispatch_payload, first * g.hidden_bytes, rows * g.hidden_bytes);
  if (!p) return g.fail(p.err());
  b.payload = *p;
  if (!b.payload) b.meta = nullptr;
  return b;
}

// Slot `slot` of d's expert-major dispatch output when it is mapped here (same process or
// host, one node; split: payload memory, a same-host peer's device region through CUDA IPC).
result<char*> peer_output(ep_group_impl& g, int d, uint64_t slot) {
  const remote_region& out = g.peers[d].output;
  if (out.size == 0) return static_cast<char*>(nullptr);
  const int64_t bytes =
      g.output_slot_bytes > 0 ? g.output_slot_bytes : static_cast<int64_t>(out.size);
  auto p = g.peer_payload(d, out, static_cast<int64_t>(slot) * bytes, bytes);
  if (!p) return g.fail(p.err());
  return *p;
}

// Rows (token, local expert) of the output of a one-node group, in the order of
// PROTOCOL.md "Rows in place": local expert j's rows are those of source 0, then source 1,
// ...; every rank computes the same positions from the count records' entries per expert.
// first[j] = where source `s`'s rows of d's local expert j start in d's output.
status output_starts(ep_group_impl& g, int d, int s, std::vector<int64_t>& first) {
  const int64_t num_local = g.num_local_experts, first_expert = d * num_local;
  first.assign(static_cast<size_t>(num_local), 0);
  int64_t at = 0;
  for (int64_t j = 0; j < num_local; ++j) {
    int64_t before = 0, total = 0;
    for (int q = 0; q < g.num_ranks; ++q) {
      const int64_t c = g.entries_from(q)[first_expert + j];
      total += c;
      if (q < s) before += c;
    }
    first[j] = at + before;
    at += total;
  }
  if (at > g.num_ranks * g.cfg.max_tokens_per_rank * g.cfg.topk)
    return g.fail(error{errc::malformed_message, "EP: the count records announce " +
                                                     std::to_string(at) + " entries for rank " +
                                                     std::to_string(d) +
                                                     ", more than its output holds"});
  return {};
}

ep_region_sizes normal_regions_plan(ep_group_impl& g) {
  g.row_bytes = proto::align_up(g.hidden_bytes + proto::normal_meta_bytes(g.cfg.topk), 16);
  g.split_meta_bytes = proto::align_up(proto::normal_meta_bytes(g.cfg.topk), 16);
  g.count_record_bytes = proto::align_up(
      static_cast<int64_t>(sizeof(count_record)) + 4 * static_cast<int64_t>(g.cfg.num_experts), 16);
  g.max_recv_rows_per_source = g.cfg.max_tokens_per_rank;
  g.across_nodes = g.num_nodes > 1;
  g.max_forwarded_rows_per_gateway = (g.num_nodes - 1) * g.cfg.max_tokens_per_rank;
  const int64_t num_rows = num_region_rows(g);
  ep_region_sizes sizes;
  sizes.dispatch_recv = num_rows * g.row_bytes;
  sizes.dispatch_send = num_rows * g.row_bytes;
  sizes.combine_recv = num_rows * g.hidden_bytes;
  sizes.combine_send = num_rows * g.hidden_bytes;
  // One node: the output, shared so same-host peers store payload straight into it; sized
  // for the worst case (every entry of every token of every rank), backed only where touched.
  const int64_t output_bytes =
      g.num_ranks * g.cfg.max_tokens_per_rank * g.cfg.topk * g.hidden_bytes;
  if (!g.across_nodes) {
    // Slots start on 2 MiB boundaries, so a caller can map one again (output_slot_file).
    g.output_slot_bytes =
        g.cfg.output_slots > 1 ? proto::align_up(output_bytes, int64_t{1} << 21) : output_bytes;
    sizes.dispatch_output = g.output_slot_bytes * g.cfg.output_slots;
  }
  if (!g.split()) return sizes;
  // Split: metadata rows where the interleaved layout has whole rows, payload rows apart; the
  // combine partials are staged in payload_staging. Across nodes the output is private (in
  // payload memory), sized for the same worst case.
  const int64_t meta = g.meta_stride();
  sizes.dispatch_recv = num_rows * meta;
  sizes.dispatch_send = num_rows * meta;
  sizes.combine_send = 0;
  sizes.dispatch_payload = num_rows * g.hidden_bytes;
  sizes.payload_staging = num_rows * g.hidden_bytes;
  if (g.across_nodes) sizes.output_payload = output_bytes;
  return sizes;
}

status normal_dispatch_pack(ep_group_impl& g, const uint8_t* is_token_in_rank) {
  const int num_ranks = g.num_ranks;
  const int64_t num_tokens = g.num_tokens;
  // Destinations: the ranks of our node that hold one of the token's experts, and for
  // every other node holding one, that node's gateway (its rank with our local index).
  // Inside one node that is simply every rank the token goes to.
  g.dest_slot.assign(static_cast<size_t>(num_tokens * num_ranks), -1);
  for (int64_t tk = 0; tk < num_tokens; ++tk)
    for (int d = 0; d < num_ranks; ++d) {
      if (!is_token_in_rank[tk * num_ranks + d]) continue;
      const bool same_node = !g.across_nodes || g.node_of(d) == g.node_of(g.rank);
      const int dest = same_node ? d : g.gateway_of(g.node_of(d));
      int64_t& slot = g.dest_slot[tk * num_ranks + dest];
      if (slot < 0) slot = g.num_rows_to[dest]++;
    }
  // Pack: staging[dest][i] is the i-th token (ascending index) going to dest. Destinations
  // mapped here are packed later, straight into their receive region (dispatch_bulk_write).
  // Payload of staged rows goes into the payload's plan, run in dispatch_bulk_write before
  // the writes.
  std::vector<char> direct(num_ranks, 0);
  for (int d = 0; d < num_ranks; ++d) {
    ASSIGN_OR_RETURN(const dispatch_block block, direct_dispatch_block(g, d));
    direct[d] = block.meta != nullptr;
    ASSIGN_OR_RETURN(const char* out, peer_output(g, d, 0));
    g.in_place_to[d] = direct[d] && out != nullptr;
  }
  for (int64_t tk = 0; tk < num_tokens; ++tk)
    for (int d = 0; d < num_ranks; ++d) {
      const int64_t i = g.dest_slot[tk * num_ranks + d];
      if (i < 0 || direct[d]) continue;
      const int64_t row = d * g.cfg.max_tokens_per_rank + i;
      pack_row(g, tk, meta_at(g, g.staging.data(), row),
               payload_at(g, g.payload_staging_rows(), row));
    }
  return {};
}

// Rows are written once every peer announced it is in this step (dispatch_bulk_write).
status normal_dispatch_eager_write(ep_group_impl&) { return {}; }

// d's rows, their payload into d's output at the positions every rank computes alike, their
// metadata into our block of d's dispatch region; counts the bytes stored.
status rows_in_place_write(ep_group_impl& g, int d, char* block) {
  // The slot d announced for this step (dispatch_recv checked it is one of the group's).
  ASSIGN_OR_RETURN(char* out, peer_output(g, d, g.record_from(d).output_slot));
  std::vector<int64_t> cursor;
  if (auto st = output_starts(g, d, g.rank, cursor); !st) return st;
  const int topk = g.cfg.topk;
  const int64_t first_expert = static_cast<int64_t>(d) * g.num_local_experts;
  const char* x = static_cast<const char*>(g.x);
  int64_t num_entries = 0;
  for (int64_t tk = 0; tk < g.num_tokens; ++tk) {
    const int64_t i = g.dest_slot[tk * g.num_ranks + d];
    if (i < 0) continue;
    pack_meta(g, tk, meta_at(g, block, i));
    for (int k = 0; k < topk; ++k) {
      const int64_t j = g.topk_idx[tk * topk + k] - first_expert;
      if (j < 0 || j >= g.num_local_experts) continue;
      g.payload->add(out + cursor[j]++ * g.hidden_bytes, x + tk * g.hidden_bytes, g.hidden_bytes);
      ++num_entries;
    }
  }
  g.step_bytes.dispatch_wire += static_cast<uint64_t>(
      num_entries * g.hidden_bytes + g.num_rows_to[d] * proto::normal_meta_bytes(topk));
  ++g.step_bytes.dispatch_in_place_peers;
  return {};
}

status normal_dispatch_bulk_write(ep_group_impl& g, std::vector<int64_t>& expected) {
  const int64_t rows_per_block = g.cfg.max_tokens_per_rank;
  std::vector<char> direct(g.num_ranks, 0);
  // Immediates for d's rows: the interleaved layout announces each mapped peer as soon as its
  // rows are stored (as before the split layout); split, once the plan ran.
  auto announce = [&](int d) -> status {
    if (direct[d])
      return g.notify(d, 0, dispatch_writes(g, g.num_rows_to[d]), proto::imm_dispatch,
                      g.step_bytes.dispatch_wire, g.step_bytes.dispatch_writes);
    return rows_write(g, d, d * rows_per_block, g.num_rows_to[d], g.rank * rows_per_block, 0);
  };
  for (int d = 0; d < g.num_ranks; ++d) {
    // Mapped here: every peer announced it is in this step (done reading the previous one),
    // so pack the rows straight from the tokens into its region, one copy.
    ASSIGN_OR_RETURN(const dispatch_block block, direct_dispatch_block(g, d));
    if (block.meta) {
      direct[d] = 1;
      if (g.in_place_to[d]) {
        // In place: the payload once per (token, local expert of d) straight into d's
        // expert-major output, the metadata into d's dispatch region (PROTOCOL.md).
        if (auto st = rows_in_place_write(g, d, block.meta); !st) return st;
      } else {
        for (int64_t tk = 0; tk < g.num_tokens; ++tk)
          if (const int64_t i = g.dest_slot[tk * g.num_ranks + d]; i >= 0)
            pack_row(g, tk, meta_at(g, block.meta, i), payload_at(g, block.payload, i));
        g.step_bytes.dispatch_wire += static_cast<uint64_t>(g.num_rows_to[d] * g.row_bytes);
      }
    }
    if (g.split()) continue;
    if (auto st = announce(d); !st) return st;
  }
  if (g.split()) {
    // Staged and mapped peers' payload in one plan, complete before any immediate.
    if (auto st = g.payload->run(); !st) return g.fail(st.err());
    for (int d = 0; d < g.num_ranks; ++d)
      if (auto st = announce(d); !st) return st;
  }
  for (int s = 0; s < g.num_ranks; ++s) expected[s] = dispatch_writes(g, g.num_rows_from[s]);
  return {};
}

// Gateway role (across nodes): every row that arrived from another node goes once to each
// rank of this node holding one of its experts, then the same count-first,
// count-the-immediates exchange runs inside the node (immediates flagged `forwarded`).
status forward_to_node(ep_group_impl& g) {
  const int num_ranks = g.num_ranks, num_ranks_per_node = g.num_ranks_per_node;
  const int64_t max_tokens = g.cfg.max_tokens_per_rank;
  const int topk = g.cfg.topk;
  const int64_t capacity = g.max_forwarded_rows_per_gateway;
  const int my_node = g.node_of(g.rank);
  const uint32_t forwarded = 1;
  g.num_forwarded_to.assign(num_ranks_per_node, 0);
  g.gateway_slot.assign(static_cast<size_t>(num_ranks * max_tokens * num_ranks_per_node), -1);
  for (int s = 0; s < num_ranks; ++s) {
    if (g.node_of(s) == my_node) continue;
    for (int64_t i = 0; i < g.num_rows_from[s]; ++i) {
      const int64_t row = s * max_tokens + i;
      const char* meta = meta_at(g, g.dispatch_recv_region.data(), row);
      for (int l = 0; l < num_ranks_per_node; ++l) {
        const int64_t first_expert =
            static_cast<int64_t>(my_node * num_ranks_per_node + l) * g.num_local_experts;
        bool wanted = false;
        for (int k = 0; k < topk && !wanted; ++k) {
          const int32_t e = meta_expert(meta, k);
          wanted = e >= first_expert && e < first_expert + g.num_local_experts;
        }
        if (!wanted) continue;
        if (g.num_forwarded_to[l] >= capacity)
          return g.fail(
              error{errc::malformed_message, "EP: more rows to forward than the node holds"});
        const int64_t pos = g.num_forwarded_to[l]++;
        // The whole row (interleaved), or the metadata row and the payload row (split).
        const int64_t to = forwarded_base(g, l) + pos;
        std::memcpy(g.staging.data() + to * g.meta_stride(),
                    g.dispatch_recv_region.data() + row * g.meta_stride(),
                    static_cast<size_t>(g.meta_stride()));
        if (g.split())
          g.payload->add(payload_at(g, g.payload_staging.data(), to),
                         payload_at(g, g.dispatch_payload_region.data(), row), g.hidden_bytes);
        g.gateway_slot[(s * max_tokens + i) * num_ranks_per_node + l] = pos;
      }
    }
  }
  const int64_t stride = g.count_record_bytes;
  for (int l = 0; l < num_ranks_per_node; ++l) {
    const int d = my_node * num_ranks_per_node + l;
    char* at = g.ctrl_send.data() + (num_ranks + l) * stride;
    const count_record rec{static_cast<uint64_t>(g.num_forwarded_to[l]), 0, 0, 0};
    std::memcpy(at, &rec, sizeof rec);
    const int64_t off = (2 * num_ranks + (g.seq & 1) * num_ranks + g.rank) * stride;
    if (auto st = g.write(d, at, sizeof rec, g.peers[d].ctrl, off, proto::imm_count,
                          g.step_bytes.dispatch_wire, g.step_bytes.dispatch_writes, forwarded);
        !st)
      return st;
  }
  if (auto st = g.payload->run(); !st) return g.fail(st.err());
  for (int l = 0; l < num_ranks_per_node; ++l) {
    const int d = my_node * num_ranks_per_node + l;
    if (auto st = rows_write(g, d, forwarded_base(g, l), g.num_forwarded_to[l],
                             forwarded_base(g, g.local_of(g.rank)), forwarded);
        !st)
      return st;
  }
  std::vector<int64_t> expected(num_ranks, 0);
  for (int l = 0; l < num_ranks_per_node; ++l) expected[my_node * num_ranks_per_node + l] = 1;
  if (auto st = g.wait_for(proto::imm_count, expected, "forwarded count exchange", forwarded); !st)
    return st;
  const char* got = g.ctrl_recv.data() + (2 * num_ranks + (g.seq & 1) * num_ranks) * stride;
  g.num_forwarded_from.assign(num_ranks_per_node, 0);
  std::fill(expected.begin(), expected.end(), 0);
  for (int l = 0; l < num_ranks_per_node; ++l) {
    const int q = my_node * num_ranks_per_node + l;
    count_record rec;
    std::memcpy(&rec, got + q * stride, sizeof rec);
    g.num_forwarded_from[l] = static_cast<int64_t>(rec.rows);
    if (g.num_forwarded_from[l] > capacity)
      return g.fail(
          error{errc::malformed_message, "EP: gateway " + std::to_string(q) + " announced " +
                                             std::to_string(g.num_forwarded_from[l]) +
                                             " forwarded rows, over " + std::to_string(capacity)});
    expected[q] = dispatch_writes(g, g.num_forwarded_from[l]);
  }
  return g.wait_for(proto::imm_dispatch, expected, "forwarded data", forwarded);
}

// Output row r holds entry k of the receive-region row `row` (metadata `meta`): where it came
// from, and the way back for combine.
void attribute_output_row(ep_group_impl& g, int64_t r, int64_t row, int k, const char* meta) {
  const int topk = g.cfg.topk;
  g.output.src_rank[r] = meta_source(meta);
  g.output.src_token[r] = meta_token(meta);
  g.output.src_k[r] = k;
  g.output_recv_pos[r] = row;
  g.recv_slot[row * topk + k] = r;
  std::memcpy(&g.recv_weight[row * topk + k], meta + 8 + 4 * topk + 4 * k, 4);
}

// One node: output positions from the count records (where in-place sources stored their
// payload already); each source's rows must name exactly the entries it announced.
status one_node_output_build(ep_group_impl& g) {
  const int num_ranks = g.num_ranks, topk = g.cfg.topk;
  const int64_t num_local = g.num_local_experts, max_tokens = g.cfg.max_tokens_per_rank;
  const int64_t first_expert = static_cast<int64_t>(g.rank) * num_local;
  std::vector<int64_t> per_expert(num_local + 1, 0);
  int64_t num_entries = 0, bound = 0;
  for (int s = 0; s < num_ranks; ++s) {
    bound += g.num_rows_from[s] * topk;
    for (int64_t j = 0; j < num_local; ++j) {
      per_expert[j + 1] += g.entries_from(s)[first_expert + j];
      num_entries += g.entries_from(s)[first_expert + j];
    }
  }
  if (num_entries > bound)
    return g.fail(error{errc::malformed_message,
                        "EP: the count records announce " + std::to_string(num_entries) +
                            " entries for this rank, more than their rows can name"});
  g.start_output(per_expert);
  char* out = g.output_rows();
  g.recv_slot.assign(static_cast<size_t>(num_region_rows(g) * topk), -1);
  g.recv_weight.assign(g.recv_slot.size(), 0.0f);
  std::vector<int64_t> cursor, end(static_cast<size_t>(num_local));
  for (int s = 0; s < num_ranks; ++s) {
    if (auto st = output_starts(g, g.rank, s, cursor); !st) return st;
    for (int64_t j = 0; j < num_local; ++j)
      end[j] = cursor[j] + g.entries_from(s)[first_expert + j];
    for (int64_t i = 0; i < g.num_rows_from[s]; ++i) {
      const int64_t row = s * max_tokens + i;
      const char* payload = payload_at(g, g.dispatch_payload_rows(), row);
      const char* meta = meta_at(g, g.dispatch_recv_region.data(), row);
      if (meta_source(meta) != s)
        return g.fail(error{errc::malformed_message,
                            "EP: a row from rank " + std::to_string(s) + " names another source"});
      bool any = false;
      for (int k = 0; k < topk; ++k) {
        const int64_t local = g.local_expert(meta_expert(meta, k));
        if (local < 0) continue;
        any = true;
        if (cursor[local] >= end[local])
          return g.fail(error{errc::malformed_message, "EP: rank " + std::to_string(s) +
                                                           "'s rows name more entries of expert " +
                                                           std::to_string(first_expert + local) +
                                                           " than it announced"});
        const int64_t r = cursor[local]++;
        if (!g.in_place_from[s]) g.payload->add(out + r * g.hidden_bytes, payload, g.hidden_bytes);
        attribute_output_row(g, r, row, k, meta);
      }
      if (!any)
        return g.fail(error{errc::malformed_message, "EP: a row from rank " + std::to_string(s) +
                                                         " names no expert of this rank"});
    }
    for (int64_t j = 0; j < num_local; ++j)
      if (cursor[j] != end[j])
        return g.fail(error{errc::malformed_message,
                            "EP: rank " + std::to_string(s) + " announced " +
                                std::to_string(g.entries_from(s)[first_expert + j]) +
                                " entries of expert " + std::to_string(first_expert + j) +
                                ", its rows name fewer"});
  }
  if (auto st = g.payload->run(); !st) return g.fail(st.err());
  return {};
}

// The expert-major output. Across nodes: every token row that is ours (sent directly by a
// rank of our node, or forwarded by one of its gateways), in (source rank, token) order,
// fanned out from the dispatch region to each local expert it names.
status normal_dispatch_output_build(ep_group_impl& g) {
  if (!g.across_nodes) return one_node_output_build(g);
  if (auto st = forward_to_node(g); !st) return st;
  const int num_ranks = g.num_ranks, topk = g.cfg.topk;
  const int64_t max_tokens = g.cfg.max_tokens_per_rank;
  auto meta_of = [&](int64_t row) { return meta_at(g, g.dispatch_recv_region.data(), row); };
  std::vector<int64_t> rows;  // receive-region row indices
  for (int s = 0; s < num_ranks; ++s) {
    // Inter-node rows were forwarded, they are not ours.
    if (g.node_of(s) != g.node_of(g.rank)) continue;
    for (int64_t i = 0; i < g.num_rows_from[s]; ++i) rows.push_back(s * max_tokens + i);
  }
  for (int l = 0; l < g.num_ranks_per_node; ++l)
    for (int64_t p = 0; p < g.num_forwarded_from[l]; ++p) rows.push_back(forwarded_base(g, l) + p);
  auto key = [&](int64_t row) {
    return std::make_pair(meta_source(meta_of(row)), meta_token(meta_of(row)));
  };
  std::stable_sort(rows.begin(), rows.end(), [&](int64_t a, int64_t b) { return key(a) < key(b); });
  std::vector<int64_t> per_expert(g.num_local_experts + 1, 0);
  for (int64_t row : rows) {
    const char* meta = meta_of(row);
    bool any = false;
    for (int k = 0; k < topk; ++k) {
      const int64_t local = g.local_expert(meta_expert(meta, k));
      if (local >= 0) {
        ++per_expert[local + 1];
        any = true;
      }
    }
    const int32_t source = meta_source(meta);
    if (!any || source < 0 || source >= num_ranks)
      return g.fail(error{errc::malformed_message,
                          "EP: a received row names no expert of this rank or no valid source"});
  }
  g.start_output(per_expert);
  g.recv_slot.assign(static_cast<size_t>(num_region_rows(g) * topk), -1);
  g.recv_weight.assign(g.recv_slot.size(), 0.0f);
  std::vector<int64_t> cursor(per_expert.begin(), per_expert.end() - 1);
  char* out = g.output_rows();
  for (int64_t row : rows) {
    const char* payload = payload_at(g, g.dispatch_payload_rows(), row);
    const char* meta = meta_of(row);
    for (int k = 0; k < topk; ++k) {
      const int64_t local = g.local_expert(meta_expert(meta, k));
      if (local < 0) continue;
      const int64_t r = cursor[local]++;
      g.payload->add(out + r * g.hidden_bytes, payload, g.hidden_bytes);
      attribute_output_row(g, r, row, k, meta);
    }
  }
  if (auto st = g.payload->run(); !st) return g.fail(st.err());
  return {};
}

// Reduce on this rank: one partial row per received token, sum over its local experts in k
// order (kernels' combine), then back to whoever sent the token, in its order.
status normal_combine_write(ep_group_impl& g, const char* expert_out) {
  const int num_ranks = g.num_ranks, num_ranks_per_node = g.num_ranks_per_node;
  const int topk = g.cfg.topk;
  const int64_t max_tokens = g.cfg.max_tokens_per_rank, hidden_bytes = g.hidden_bytes;
  const int64_t num_out_rows = g.output.num_recv_rows;
  const uint32_t forwarded = 1;
  for (int s = 0; s < num_ranks; ++s) {
    if (g.num_rows_from[s] == 0 || (g.across_nodes && g.node_of(s) != g.node_of(g.rank))) continue;
    // Mapped here: reduce straight into our block of s's combine region (s waits in
    // combine_recv for this step; it read the previous step's before dispatching this one).
    // Split: the combine region is payload memory (a same-host peer's through CUDA IPC).
    const int64_t len = g.num_rows_from[s] * hidden_bytes;
    auto mapped = g.peer_payload(s, g.peers[s].combine, g.rank * max_tokens * hidden_bytes, len);
    if (!mapped) return g.fail(mapped.err());
    char* direct = *mapped;
    char* dst = direct ? direct : g.payload_staging_rows() + s * max_tokens * hidden_bytes;
    const int64_t base = s * max_tokens * topk;
    if (auto st = partials_make(g, expert_out, g.recv_slot.data() + base,
                                g.recv_weight.data() + base, g.num_rows_from[s], num_out_rows, dst);
        !st)
      return st;
    if (auto st = direct ? g.notify(s, len, g.chunks(len), proto::imm_combine,
                                    g.step_bytes.combine_wire, g.step_bytes.combine_writes)
                         : partials_return(g, s);
        !st)
      return st;
  }
  if (!g.across_nodes) return {};
  // Partials of forwarded tokens go back to the gateway that forwarded them ...
  const int my_node = g.node_of(g.rank);
  for (int l = 0; l < num_ranks_per_node; ++l) {
    if (g.num_forwarded_from[l] == 0) continue;
    const int64_t base = forwarded_base(g, l);
    const int gateway = my_node * num_ranks_per_node + l;
    char* dst = g.payload_staging_rows() + base * hidden_bytes;
    if (auto st = partials_make(g, expert_out, g.recv_slot.data() + base * topk,
                                g.recv_weight.data() + base * topk, g.num_forwarded_from[l],
                                num_out_rows, dst);
        !st)
      return st;
    if (auto st = g.write_chunked(
            gateway, dst, g.num_forwarded_from[l] * hidden_bytes, g.peers[gateway].combine,
            forwarded_base(g, g.local_of(g.rank)) * hidden_bytes, proto::imm_combine,
            g.step_bytes.combine_wire, g.step_bytes.combine_writes, forwarded);
        !st)
      return st;
  }
  // ... which sums them in rank order into one partial per (token, node) for the source.
  std::vector<int64_t> expected(num_ranks, 0);
  for (int l = 0; l < num_ranks_per_node; ++l)
    expected[my_node * num_ranks_per_node + l] = g.chunks(g.num_forwarded_to[l] * hidden_bytes);
  if (auto st = g.wait_for(proto::imm_combine, expected, "forwarded partials", forwarded); !st)
    return st;
  for (int s = 0; s < num_ranks; ++s) {
    if (g.node_of(s) == my_node || g.num_rows_from[s] == 0) continue;
    std::vector<int64_t> slot(static_cast<size_t>(g.num_rows_from[s] * num_ranks_per_node), -1);
    for (int64_t i = 0; i < g.num_rows_from[s]; ++i)
      for (int l = 0; l < num_ranks_per_node; ++l) {
        const int64_t pos = g.gateway_slot[(s * max_tokens + i) * num_ranks_per_node + l];
        if (pos >= 0) slot[i * num_ranks_per_node + l] = forwarded_base(g, l) + pos;
      }
    const std::vector<float> ones(slot.size(), 1.0f);
    char* dst = g.payload_staging_rows() + s * max_tokens * hidden_bytes;
    if (auto st = reduce(g, g.combine_recv_region.data(), slot.data(), ones.data(),
                         g.num_rows_from[s], num_ranks_per_node, num_region_rows(g), dst);
        !st)
      return st;
    if (auto st = partials_return(g, s); !st) return st;
  }
  return {};
}

void normal_combine_completions_expect(const ep_group_impl& g, std::vector<int64_t>& expected) {
  for (int d = 0; d < g.num_ranks; ++d) expected[d] = g.chunks(g.num_rows_to[d] * g.hidden_bytes);
}

// One partial per rank, summed in rank order with weight 1 (exact).
status normal_combine_terms_build(ep_group_impl& g, combine_terms& terms) {
  const int num_ranks = g.num_ranks;
  const int64_t max_tokens = g.cfg.max_tokens_per_rank;
  terms.width = num_ranks;
  terms.slot.assign(static_cast<size_t>(g.num_tokens * num_ranks), -1);
  for (int64_t tk = 0; tk < g.num_tokens; ++tk)
    for (int d = 0; d < num_ranks; ++d) {
      const int64_t i = g.dest_slot[tk * num_ranks + d];
      if (i >= 0) terms.slot[tk * num_ranks + d] = d * max_tokens + i;
    }
  terms.ones.assign(terms.slot.size(), 1.0f);
  terms.weight = terms.ones.data();
  terms.num_region_rows = num_ranks * max_tokens;
  return {};
}

}  // namespace

const ep_mode_ops normal_mode_ops = {
    normal_regions_plan,
    normal_dispatch_pack,
    normal_dispatch_eager_write,
    normal_dispatch_bulk_write,
    normal_dispatch_output_build,
    normal_combine_write,
    normal_combine_completions_expect,
    normal_combine_terms_build,
};

}  // namespace moerl::fabric::detail
