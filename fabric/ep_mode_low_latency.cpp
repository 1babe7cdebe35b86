// The low-latency mode (decode; DeepEP LL): dispatch writes every (token, expert) entry
// straight into its slot at the destination, without waiting for the peers, into receive
// slots double-buffered by step parity; combine writes each output back into its entry's
// slot at the source (PROTOCOL.md, "low-latency"). On one host, tokens a sender put into
// dispatch_buffer() and outputs an expert wrote into combine_buffer() are read in place by the
// peers instead (PROTOCOL.md, "Reading in place").
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

ep_region_sizes ll_regions_plan(ep_group_impl& g) {
  ep_region_sizes sizes = entry_regions_plan(g, 2);
  g.combine_rows_offset = proto::align_up(kPositionsOffset + 4 * num_slots(g), 64);
  g.dispatch_rows_offset =
      proto::align_up(g.combine_rows_offset + num_slots(g) * g.hidden_bytes, 64);
  sizes.shared_inputs = g.dispatch_rows_offset + g.cfg.max_tokens_per_rank * g.hidden_bytes;
  return sizes;
}

// Destinations mapped here (same process or host) get their entries packed straight into
// their slots: the slots of this step's parity are free without waiting (see below). When the
// tokens are in dispatch_buffer(), those get only the metadata and read the payload from our
// tokens in place (count record flag count_flag_in_place).
status ll_dispatch_pack(ep_group_impl& g, const uint8_t*) {
  const char* shared = g.shared_inputs_region.data();
  const bool x_in_place = shared && g.x == shared + g.dispatch_rows_offset;
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
  for (int d = 0; d < g.num_ranks; ++d) {
    if (g.direct_peers[d]) {  // packed in place already: only the immediates
      const int64_t bytes_per_row =
          g.in_place_to[d] ? static_cast<int64_t>(sizeof(proto::entry_meta)) : g.row_bytes;
      if (auto st = g.notify(d, g.num_rows_to[d] * bytes_per_row, g.ll_writes(g.num_rows_to[d]),
                             proto::imm_dispatch, g.step_bytes.dispatch_wire,
                             g.step_bytes.dispatch_writes);
          !st)
        return st;
      continue;
    }
    for (int64_t i = 0; i < g.num_rows_to[d]; i += entries_per_write)
      if (auto st = g.write(d, g.staging.data() + (d * capacity + i) * g.row_bytes,
                            std::min(entries_per_write, g.num_rows_to[d] - i) * g.row_bytes,
                            g.peers[d].dispatch, (first_row + g.rank * capacity + i) * g.row_bytes,
                            proto::imm_dispatch, g.step_bytes.dispatch_wire,
                            g.step_bytes.dispatch_writes);
          !st)
        return st;
  }
  return {};
}

// Nothing left to write: the data went out with dispatch_send.
status ll_dispatch_bulk_write(ep_group_impl& g, std::vector<int64_t>& expected) {
  for (int s = 0; s < g.num_ranks; ++s) expected[s] = g.ll_writes(g.num_rows_from[s]);
  return {};
}

// Sources that sent only metadata (count record flag checked by dispatch_recv) have their
// tokens read from their dispatch_buffer().
status ll_dispatch_output_build(ep_group_impl& g) {
  std::vector<const char*> x_of_source(g.num_ranks, nullptr);
  for (int s = 0; s < g.num_ranks; ++s)
    if (g.in_place_from[s]) x_of_source[s] = g.peer_shared_inputs(s) + g.dispatch_rows_offset;
  return entry_output_build(g, parity_first_row(g), &x_of_source);
}

// Each expert output row straight back into the slot its entry came from at the source
// (ll_entries_per_write adjacent slots per write); when the outputs are in combine_buffer()'s
// shared region, sources mapped here get only the immediates and read them in place.
status ll_combine_write(ep_group_impl& g, const char* expert_out) {
  char* input = g.shared_inputs_region.data();
  const bool in_place = input && expert_out == input + g.combine_rows_offset;
  if (input) {
    // Plain stores before the notify() of this step's immediates, so a source that counted
    // them reads this header and these positions (PROTOCOL.md, "Same host").
    const shared_inputs_header h{g.seq, in_place ? 1u : 0u};
    std::memcpy(input, &h, sizeof h);
    if (in_place) {
      auto* pos = reinterpret_cast<int32_t*>(input + kPositionsOffset);
      for (int64_t r = 0; r < g.output.num_recv_rows; ++r)
        pos[g.output.src_rank[r] * g.max_rows_per_peer + g.output_recv_pos[r]] =
            static_cast<int32_t>(r);
    }
  }
  entry_outputs_stage(g, expert_out, &g.direct_peers, in_place);
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
              g.write(s, g.staging.data() + (s * capacity + i) * g.hidden_bytes,
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
  const int64_t capacity = g.max_rows_per_peer, slots = num_slots(g);
  std::vector<const char*> in_place_rows(g.num_ranks, nullptr);  // destination's rows, or null
  std::vector<const int32_t*> positions(g.num_ranks, nullptr);
  bool any = false;
  for (int d = 0; d < g.num_ranks; ++d) {
    if (g.num_rows_to[d] == 0) continue;
    char* base = g.peer_shared_inputs(d);
    if (!base) continue;  // not shared with us: its outputs came into our combine region
    shared_inputs_header h;
    std::memcpy(&h, base, sizeof h);
    if (h.step != g.seq || h.in_place > 1)
      return g.fail(error{errc::malformed_message,
                          "EP: rank " + std::to_string(d) + "'s combine header names step " +
                              std::to_string(h.step) + " (in_place " + std::to_string(h.in_place) +
                              ") in step " + std::to_string(g.seq)});
    if (!h.in_place) continue;
    in_place_rows[d] = base + g.combine_rows_offset;
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
