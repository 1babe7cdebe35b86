// The low-latency mode (decode; DeepEP LL): dispatch writes every (token, expert) entry
// straight into its slot at the destination, without waiting for the peers, into receive
// slots double-buffered by step parity; combine writes each output back into its entry's
// slot at the source (PROTOCOL.md, "low-latency"). On one host, tokens a sender put into
// dispatch_buffer() and outputs an expert wrote into combine_buffer() are read in place by the
// peers instead (PROTOCOL.md, "Reading in place").
//
// With ep_config::memory cuda (or its host twin host_split) the same protocol runs on the
// split layout (fabric/DEVICE_MEMORY.md): payload rows in regions of their own (device
// memory), metadata rows, count records, positions and headers in host regions, because this
// file reads them on the CPU. Every payload move of a phase is one plan of g.payload, run
// before the phase's immediates.
#include <algorithm>
#include <cstring>

#include "fabric/internal/ep_group_impl.h"

namespace moerl::fabric::detail {

namespace {

// The dispatch receive region holds two halves, one per step parity.
int64_t parity_first_row(const ep_group_impl& g) {
  return (g.seq & 1) * g.num_ranks * g.max_rows_per_peer;
}

// The shared inputs region: a header saying whether this step's expert outputs are in place,
// the output row of each entry a source sent us ([source][slot], int32), the combine rows
// (combine_buffer()), then the tokens (dispatch_buffer()).
struct shared_inputs_header {
  uint32_t step = 0;
  uint32_t in_place = 0;
};
constexpr int64_t kPositionsOffset = 64;

int64_t num_slots(const ep_group_impl& g) { return g.num_ranks * g.max_rows_per_peer; }

// Rows of combine_buffer(): one per slot, or every expert's block (ll_expert_stride).
int64_t num_combine_rows(const ep_group_impl& g) {
  return g.expert_stride() > 0 ? g.combine_buffer_rows(0) : num_slots(g);
}

ep_region_sizes ll_regions_plan(ep_group_impl& g) {
  ep_region_sizes sizes = entry_regions_plan(g, 2);
  if (g.split()) {
    // Metadata rows where the interleaved layout has whole rows; payload rows apart.
    const int64_t meta = g.meta_stride(), payload = g.payload_stride();
    sizes.dispatch_recv = 2 * num_slots(g) * meta;
    sizes.dispatch_send = num_slots(g) * meta;
    sizes.combine_send = 0;  // combine stages payload rows only: in payload_staging
    sizes.dispatch_payload = 2 * num_slots(g) * payload;
    sizes.payload_staging = num_slots(g) * payload;
    // The block layout's output rows are the caller's (set_recv_rows).
    sizes.output_payload = g.expert_stride() > 0 ? 0 : num_slots(g) * payload;
    g.combine_rows_offset = 0;
    g.dispatch_rows_offset = proto::align_up(num_combine_rows(g) * g.hidden_bytes, 64);
    sizes.shared_payload = g.dispatch_rows_offset + g.cfg.max_tokens_per_rank * g.hidden_bytes;
    sizes.shared_inputs = kPositionsOffset + 4 * num_slots(g);  // the header and positions
    return sizes;
  }
  g.combine_rows_offset = proto::align_up(kPositionsOffset + 4 * num_slots(g), 64);
  g.dispatch_rows_offset =
      proto::align_up(g.combine_rows_offset + num_combine_rows(g) * g.hidden_bytes, 64);
  sizes.shared_inputs = g.dispatch_rows_offset + g.cfg.max_tokens_per_rank * g.hidden_bytes;
  return sizes;
}

// Destinations mapped here (same process or host) get their entries packed straight into
// their slots: the slots of this step's parity are free without waiting (see below). When the
// tokens are in dispatch_buffer(), those get only the metadata and read the payload from our
// tokens in place (count record flag count_flag_in_place).
status ll_dispatch_pack(ep_group_impl& g, const uint8_t*) {
  const bool x_in_place =
      g.shared_inputs_region.data() && g.x == g.inputs_rows() + g.dispatch_rows_offset;
  if (auto st = entry_rows_pack_direct(g, parity_first_row(g), g.direct_peers, x_in_place); !st)
    return st;
  for (int d = 0; d < g.num_ranks && x_in_place; ++d) {
    g.in_place_to[d] = g.direct_peers[d];
    g.step_bytes.dispatch_in_place_peers += g.direct_peers[d];
  }
  return {};
}

// Every entry straight into its slot now, without waiting for the peers;
// ll_entries_per_write (default 1: one write per (token, expert)) lets adjacent slots share
// a write.
status ll_dispatch_eager_write(ep_group_impl& g) {
  const int64_t capacity = g.max_rows_per_peer, entries_per_write = g.cfg.ll_entries_per_write;
  const int64_t first_row = parity_first_row(g);
  const auto meta_bytes = static_cast<int64_t>(sizeof(proto::entry_meta));
  // One row's bytes in each write: the whole row, or (split) its metadata, then its payload.
  const int64_t first_write_bytes = g.split() ? g.meta_stride() : g.row_bytes;
  for (int d = 0; d < g.num_ranks; ++d) {
    if (g.direct_peers[d]) {  // packed in place already: only the immediates
      const int64_t bytes_per_row =
          g.in_place_to[d] ? meta_bytes : first_write_bytes + (g.split() ? g.hidden_bytes : 0);
      if (auto st = g.notify(d, g.num_rows_to[d] * bytes_per_row,
                             g.ll_dispatch_writes(g.num_rows_to[d]), proto::imm_dispatch,
                             g.step_bytes.dispatch_wire, g.step_bytes.dispatch_writes);
          !st)
        return st;
      continue;
    }
    for (int64_t i = 0; i < g.num_rows_to[d]; i += entries_per_write) {
      const int64_t rows = std::min(entries_per_write, g.num_rows_to[d] - i);
      const int64_t slot = first_row + g.rank * capacity + i;
      if (auto st = g.write(d, g.staging.data() + (d * capacity + i) * first_write_bytes,
                            rows * first_write_bytes, g.peers[d].dispatch, slot * first_write_bytes,
                            proto::imm_dispatch, g.step_bytes.dispatch_wire,
                            g.step_bytes.dispatch_writes);
          !st)
        return st;
      if (!g.split()) continue;
      if (auto st = g.write(d, g.payload_staging.data() + (d * capacity + i) * g.hidden_bytes,
                            rows * g.hidden_bytes, g.peers[d].dispatch_payload,
                            slot * g.hidden_bytes, proto::imm_dispatch, g.step_bytes.dispatch_wire,
                            g.step_bytes.dispatch_writes);
          !st)
        return st;
    }
  }
  return {};
}

// Nothing left to write: the data went out with dispatch_send.
status ll_dispatch_bulk_write(ep_group_impl& g, std::vector<int64_t>& expected) {
  for (int s = 0; s < g.num_ranks; ++s) expected[s] = g.ll_dispatch_writes(g.num_rows_from[s]);
  return {};
}

// Sources that sent only metadata (count record flag checked by dispatch_recv) have their
// tokens read from their dispatch_buffer().
status ll_dispatch_output_build(ep_group_impl& g) {
  std::vector<const char*> x_of_source(g.num_ranks, nullptr);
  for (int s = 0; s < g.num_ranks; ++s) {
    if (!g.in_place_from[s]) continue;
    auto rows = g.peer_inputs_rows(s);
    if (!rows) return g.fail(rows.err());
    if (!*rows)
      return g.fail(error{errc::malformed_message, "EP: rank " + std::to_string(s) +
                                                       " sent its tokens in place, but its "
                                                       "dispatch_buffer() is not mapped here"});
    x_of_source[s] = *rows + g.dispatch_rows_offset;
  }
  return entry_output_build(g, parity_first_row(g), &x_of_source);
}

// Each expert output row straight back into the slot its entry came from at the source
// (ll_entries_per_write adjacent slots per write); when the outputs are in combine_buffer()'s
// shared region, sources mapped here get only the immediates and read them in place.
status ll_combine_write(ep_group_impl& g, const char* expert_out) {
  char* input = g.shared_inputs_region.data();  // the header and positions
  const bool in_place = input && expert_out == g.inputs_rows() + g.combine_rows_offset;
  if (input) {
    // Plain stores before the notify() of this step's immediates, so a source that counted
    // them reads this header and these positions (PROTOCOL.md, "Same host").
    const shared_inputs_header h{g.seq, in_place ? 1u : 0u};
    std::memcpy(input, &h, sizeof h);
    if (in_place) {
      auto* pos = reinterpret_cast<int32_t*>(input + kPositionsOffset);
      for (int64_t r = 0; r < g.output.num_recv_rows; ++r)
        pos[g.output.src_rank[r] * g.max_rows_per_peer + g.output_recv_pos[r]] =
            static_cast<int32_t>(g.output_pos[r]);
    }
  }
  if (auto st = entry_outputs_stage(g, expert_out, &g.direct_peers, in_place); !st) return st;
  if (in_place)
    for (int s = 0; s < g.num_ranks; ++s) g.step_bytes.combine_in_place_peers += g.direct_peers[s];
  const int64_t capacity = g.max_rows_per_peer, entries_per_write = g.cfg.ll_entries_per_write;
  for (int s = 0; s < g.num_ranks; ++s) {
    if (g.direct_peers[s]) {  // copied into its slots already, or read in place: immediates
      if (auto st = g.notify(s, in_place ? 0 : g.num_rows_from[s] * g.hidden_bytes,
                             g.ll_writes(g.num_rows_from[s]), proto::imm_combine,
                             g.step_bytes.combine_wire, g.step_bytes.combine_writes);
          !st)
        return st;
      continue;
    }
    for (int64_t i = 0; i < g.num_rows_from[s]; i += entries_per_write)
      if (auto st =
              g.write(s, g.payload_staging_rows() + (s * capacity + i) * g.hidden_bytes,
                      std::min(entries_per_write, g.num_rows_from[s] - i) * g.hidden_bytes,
                      g.peers[s].combine, (g.rank * capacity + i) * g.hidden_bytes,
                      proto::imm_combine, g.step_bytes.combine_wire, g.step_bytes.combine_writes);
          !st)
        return st;
  }
  return {};
}

void ll_combine_completions_expect(const ep_group_impl& g, std::vector<int64_t>& expected) {
  for (int d = 0; d < g.num_ranks; ++d) expected[d] = g.ll_writes(g.num_rows_to[d]);
}

// The entry terms; a destination that left its outputs in place (its header says so for this
// step) has its terms read from its combine_buffer() through the positions it wrote.
status ll_combine_terms_build(ep_group_impl& g, combine_terms& terms) {
  if (auto st = entry_combine_terms_build(g, terms); !st) return st;
  const int64_t capacity = g.max_rows_per_peer, slots = num_combine_rows(g);
  std::vector<const char*> in_place_rows(g.num_ranks, nullptr);  // destination's rows, or null
  std::vector<const int32_t*> positions(g.num_ranks, nullptr);
  bool any = false;
  for (int d = 0; d < g.num_ranks; ++d) {
    if (g.num_rows_to[d] == 0) continue;
    char* base = g.peer_shared_inputs(d);  // its header and positions
    if (!base) continue;  // not shared with us: its outputs came into our combine region
    shared_inputs_header h;
    std::memcpy(&h, base, sizeof h);
    if (h.step != g.seq || h.in_place > 1)
      return g.fail(error{errc::malformed_message,
                          "EP: rank " + std::to_string(d) + "'s combine header names step " +
                              std::to_string(h.step) + " (in_place " + std::to_string(h.in_place) +
                              ") in step " + std::to_string(g.seq)});
    if (!h.in_place) continue;
    auto rows = g.peer_inputs_rows(d);
    if (!rows) return g.fail(rows.err());
    if (!*rows)
      return g.fail(error{errc::malformed_message,
                          "EP: rank " + std::to_string(d) +
                              " left its outputs in place, but its combine_buffer() is not "
                              "mapped here"});
    in_place_rows[d] = *rows + g.combine_rows_offset;
    positions[d] = reinterpret_cast<const int32_t*>(base + kPositionsOffset) + g.rank * capacity;
    any = true;
  }
  if (!any) return {};
  const int topk = g.cfg.topk;
  const char* own = g.combine_recv_region.data();
  terms.rows.assign(terms.slot.size(), nullptr);
  for (int64_t tk = 0; tk < g.num_tokens; ++tk)
    for (int k = 0; k < topk; ++k) {
      const int64_t slot = terms.slot[tk * topk + k];
      if (slot < 0) continue;
      const int d = static_cast<int>(slot / capacity);
      if (!in_place_rows[d]) {
        terms.rows[tk * topk + k] = own + slot * g.hidden_bytes;
        continue;
      }
      const int32_t row = positions[d][slot % capacity];
      if (row < 0 || row >= slots)
        return g.fail(error{errc::malformed_message,
                            "EP: rank " + std::to_string(d) + " placed an entry's output at row " +
                                std::to_string(row) + ", outside its " + std::to_string(slots)});
      terms.rows[tk * topk + k] = in_place_rows[d] + row * g.hidden_bytes;
    }
  return {};
}

}  // namespace

const ep_mode_ops low_latency_mode_ops = {
    ll_regions_plan,
    ll_dispatch_pack,
    ll_dispatch_eager_write,
    ll_dispatch_bulk_write,
    ll_dispatch_output_build,
    ll_combine_write,
    ll_combine_completions_expect,
    ll_combine_terms_build,
};

}  // namespace moerl::fabric::detail
