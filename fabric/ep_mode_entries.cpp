// What the two per-entry modes (low_latency, baseline) share: one row per (token, expert)
// entry, numbered per destination in (token, k) order, in blocks of max_rows_per_peer rows
// per peer; combine returns each expert output to the slot its entry came from and reduces
// with the routing weights in k order.
#include <algorithm>
#include <cstring>

#include "fabric/internal/ep_group_impl.h"

namespace moerl::fabric::detail {

using proto::entry_meta;

ep_region_sizes entry_regions_plan(ep_group_impl& g, int64_t num_dispatch_recv_halves) {
  g.row_bytes = proto::align_up(g.hidden_bytes + static_cast<int64_t>(sizeof(entry_meta)), 16);
  const int64_t worst =
      g.cfg.max_tokens_per_rank * std::min<int64_t>(g.cfg.topk, g.num_local_experts);
  g.max_rows_per_peer = g.cfg.rows_per_peer > 0 ? g.cfg.rows_per_peer : worst;
  g.max_recv_rows_per_source = g.max_rows_per_peer;
  const int64_t num_block_rows = g.num_ranks * g.max_rows_per_peer;
  ep_region_sizes sizes;
  sizes.dispatch_recv = num_dispatch_recv_halves * num_block_rows * g.row_bytes;
  sizes.dispatch_send = num_block_rows * g.row_bytes;
  sizes.combine_recv = num_block_rows * g.hidden_bytes;
  sizes.combine_send = num_block_rows * g.hidden_bytes;
  return sizes;
}

status entry_rows_pack(ep_group_impl& g, const uint8_t*) {
  std::vector<char> none;
  return entry_rows_pack_direct(g, -1, none);
}

status entry_rows_pack_direct(ep_group_impl& g, int64_t direct_first_row, std::vector<char>& direct,
                              bool meta_only) {
  const int topk = g.cfg.topk;
  const int64_t num_tokens = g.num_tokens, capacity = g.max_rows_per_peer;
  g.entry_slot.assign(static_cast<size_t>(num_tokens * topk), -1);
  for (int64_t tk = 0; tk < num_tokens; ++tk)
    for (int k = 0; k < topk; ++k) {
      const int64_t e = g.topk_idx[tk * topk + k];
      if (e < 0) continue;
      const int d = static_cast<int>(e / g.num_local_experts);
      g.entry_slot[tk * topk + k] = g.num_rows_to[d]++;
    }
  for (int d = 0; d < g.num_ranks; ++d)
    if (g.num_rows_to[d] > capacity)
      return error{errc::capacity_exceeded,
                   "dispatch_send: " + std::to_string(g.num_rows_to[d]) + " entries for rank " +
                       std::to_string(d) + " exceed its " + std::to_string(capacity) +
                       " receive rows (a token names one expert twice, or rows_per_peer is too "
                       "small)"};
  // Where each destination's block starts: our block of its region when it is mapped here,
  // else staging[d] (entries for d in (token, k) order, the block d receives). The split
  // layout has two blocks per destination, metadata and payload, and a destination is direct
  // when both are mapped here.
  const int64_t meta_stride = g.meta_stride(), payload_stride = g.payload_stride();
  std::vector<char*> meta_block(g.num_ranks), payload_block(g.num_ranks);
  direct.assign(g.num_ranks, 0);
  for (int d = 0; d < g.num_ranks; ++d) {
    const int64_t first = direct_first_row + g.rank * capacity;
    char* meta = direct_first_row < 0 ? nullptr
                                      : g.peer_memory(d, g.peers[d].dispatch, first * meta_stride,
                                                      capacity * meta_stride);
    char* payload = meta;
    if (meta && g.split()) {
      auto p = g.peer_payload(d, g.peers[d].dispatch_payload, first * payload_stride,
                              capacity * payload_stride);
      if (!p) return g.fail(p.err());
      payload = *p;
    }
    direct[d] = meta && payload;
    meta_block[d] = direct[d] ? meta : g.staging.data() + d * capacity * meta_stride;
    payload_block[d] = direct[d]   ? payload
                       : g.split() ? g.payload_staging.data() + d * capacity * payload_stride
                                   : meta_block[d];
  }
  const char* x = static_cast<const char*>(g.x);
  for (int64_t tk = 0; tk < num_tokens; ++tk)
    for (int k = 0; k < topk; ++k) {
      const int64_t e = g.topk_idx[tk * topk + k];
      if (e < 0) continue;
      const int d = static_cast<int>(e / g.num_local_experts);
      const int64_t slot = g.entry_slot[tk * topk + k];
      if (!(meta_only && direct[d]))
        g.payload->add(payload_block[d] + slot * payload_stride, x + tk * g.hidden_bytes,
                       g.hidden_bytes);
      entry_meta m{static_cast<int32_t>(tk), k, static_cast<int32_t>(e), 0};
      std::memcpy(meta_block[d] + slot * meta_stride + g.meta_offset(), &m, sizeof m);
    }
  if (auto st = g.payload->run(); !st) return g.fail(st.err());
  return {};
}

status entry_output_build(ep_group_impl& g, int64_t first_row,
                          const std::vector<const char*>* x_of_source) {
  const int topk = g.cfg.topk;
  std::vector<int64_t> per_expert(g.num_local_experts + 1, 0);
  auto row_of = [&](int s, int64_t i) { return first_row + s * g.max_rows_per_peer + i; };
  auto meta_at = [&](int s, int64_t i) -> const char* {
    return g.dispatch_recv_region.data() + row_of(s, i) * g.meta_stride() + g.meta_offset();
  };
  // Pass 1: rows per local expert, and validation of what arrived.
  for (int s = 0; s < g.num_ranks; ++s)
    for (int64_t i = 0; i < g.num_rows_from[s]; ++i) {
      entry_meta m;
      std::memcpy(&m, meta_at(s, i), sizeof m);
      const bool token_ok = m.token >= 0 && m.token < g.cfg.max_tokens_per_rank;
      if (g.local_expert(m.expert) < 0 || m.k < 0 || m.k >= topk || !token_ok)
        return g.fail(error{errc::malformed_message,
                            "EP: an entry from rank " + std::to_string(s) + " names expert " +
                                std::to_string(m.expert) + ", k " + std::to_string(m.k) +
                                ", token " + std::to_string(m.token) +
                                ": not an expert of this rank, or out of range"});
      ++per_expert[g.local_expert(m.expert) + 1];
    }
  g.start_output(per_expert);
  // Where each row goes: r itself, or its expert's block (ll_expert_stride). Rows past a
  // block's end are not placed; their outputs are read from the block's last row, so that
  // combine stays in bounds (ep_config: the caller sees the overflow in expert_offset).
  const int64_t stride = g.expert_stride();
  g.output_pos.resize(static_cast<size_t>(g.output.num_recv_rows));
  for (int j = 0; j < g.num_local_experts; ++j)
    for (int64_t r = per_expert[j]; r < per_expert[j + 1]; ++r)
      g.output_pos[r] = stride > 0 ? j * stride + std::min(r - per_expert[j], stride - 1) : r;
  // Pass 2: place rows. Visiting (s, i) in order keeps each expert's rows in that order.
  std::vector<int64_t> cursor(per_expert.begin(), per_expert.end() - 1);
  const char* payload = g.dispatch_payload_rows();
  char* out = g.output_rows();
  for (int s = 0; s < g.num_ranks; ++s)
    for (int64_t i = 0; i < g.num_rows_from[s]; ++i) {
      entry_meta m;
      std::memcpy(&m, meta_at(s, i), sizeof m);
      const int64_t j = g.local_expert(m.expert), r = cursor[j]++;
      const char* x = x_of_source ? (*x_of_source)[s] : nullptr;
      if (stride == 0 || r - per_expert[j] < stride)
        g.payload->add(
            out + g.output_pos[r] * g.hidden_bytes,
            x ? x + m.token * g.hidden_bytes : payload + row_of(s, i) * g.payload_stride(),
            g.hidden_bytes);
      g.output.src_rank[r] = s;
      g.output.src_token[r] = m.token;
      g.output.src_k[r] = m.k;
      g.output_recv_pos[r] = i;
    }
  if (auto st = g.payload->run(); !st) return g.fail(st.err());
  return {};
}

status entry_outputs_stage(ep_group_impl& g, const char* expert_out, std::vector<char>* direct,
                           bool skip_direct) {
  const int64_t capacity = g.max_rows_per_peer;
  std::vector<char*> block(g.num_ranks);
  if (direct) direct->assign(g.num_ranks, 0);
  for (int s = 0; s < g.num_ranks; ++s) {
    char* mapped = nullptr;
    if (direct) {
      auto p = g.peer_payload(s, g.peers[s].combine, g.rank * capacity * g.hidden_bytes,
                              capacity * g.hidden_bytes);
      if (!p) return g.fail(p.err());
      mapped = *p;
      (*direct)[s] = mapped != nullptr;
    }
    block[s] = mapped ? mapped : g.payload_staging_rows() + s * capacity * g.hidden_bytes;
  }
  for (int64_t r = 0; r < g.output.num_recv_rows; ++r) {
    const int s = g.output.src_rank[r];
    if (skip_direct && (*direct)[s]) continue;
    g.payload->add(block[s] + g.output_recv_pos[r] * g.hidden_bytes,
                   expert_out + g.output_pos[r] * g.hidden_bytes, g.hidden_bytes);
  }
  if (auto st = g.payload->run(); !st) return g.fail(st.err());
  return {};
}

// Term k of token t is the output of its k-th entry, weighted by its routing weight.
status entry_combine_terms_build(ep_group_impl& g, combine_terms& terms) {
  const int topk = g.cfg.topk;
  terms.width = topk;
  terms.weight = g.topk_weights;
  terms.slot.assign(static_cast<size_t>(g.num_tokens * topk), -1);
  for (int64_t tk = 0; tk < g.num_tokens; ++tk)
    for (int k = 0; k < topk; ++k) {
      const int64_t e = g.topk_idx[tk * topk + k];
      if (e < 0) continue;
      terms.slot[tk * topk + k] =
          (e / g.num_local_experts) * g.max_rows_per_peer + g.entry_slot[tk * topk + k];
    }
  terms.num_region_rows = g.num_ranks * g.max_rows_per_peer;
  return {};
}

}  // namespace moerl::fabric::detail
