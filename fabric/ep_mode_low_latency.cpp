// The low-latency mode (decode; DeepEP LL): dispatch writes every (token, expert) entry
// straight into its slot at the destination, without waiting for the peers, into receive
// slots double-buffered by step parity; combine writes each output back into its entry's
// slot at the source (PROTOCOL.md, "low-latency").
#include <algorithm>

#include "fabric/ep_group_impl.h"

namespace moerl::fabric::detail {

namespace {

// The dispatch receive region holds two halves, one per step parity.
int64_t parity_first_row(const ep_group_impl& g) {
  return (g.seq & 1) * g.num_ranks * g.max_rows_per_peer;
}

ep_region_sizes ll_regions_plan(ep_group_impl& g) { return entry_regions_plan(g, 2); }

// Destinations mapped here (same process or host) get their entries packed straight into
// their slots: the slots of this step's parity are free without waiting (see below).
status ll_dispatch_pack(ep_group_impl& g, const uint8_t*) {
  return entry_rows_pack_direct(g, parity_first_row(g), g.direct_peers);
}

// Every entry straight into its slot now, without waiting for the peers;
// ll_entries_per_write (default 1: one write per (token, expert)) lets adjacent slots share
// a write.
status ll_dispatch_eager_write(ep_group_impl& g) {
  const int64_t capacity = g.max_rows_per_peer, entries_per_write = g.cfg.ll_entries_per_write;
  const int64_t first_row = parity_first_row(g);
  for (int d = 0; d < g.num_ranks; ++d) {
    if (g.direct_peers[d]) {  // packed in place already: only the immediates
      if (auto st = g.notify(d, g.num_rows_to[d] * g.row_bytes, g.ll_writes(g.num_rows_to[d]),
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

status ll_dispatch_output_build(ep_group_impl& g) {
  return entry_output_build(g, parity_first_row(g));
}

// Each expert output row straight back into the slot its entry came from at the source
// (ll_entries_per_write adjacent slots per write).
status ll_combine_write(ep_group_impl& g, const char* expert_out) {
  entry_outputs_stage(g, expert_out, &g.direct_peers);
  const int64_t capacity = g.max_rows_per_peer, entries_per_write = g.cfg.ll_entries_per_write;
  for (int s = 0; s < g.num_ranks; ++s) {
    if (g.direct_peers[s]) {  // copied into its slots already: only the immediates
      if (auto st =
              g.notify(s, g.num_rows_from[s] * g.hidden_bytes, g.ll_writes(g.num_rows_from[s]),
                       proto::imm_combine, g.step_bytes.combine_wire, g.step_bytes.combine_writes);
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

}  // namespace

const ep_mode_ops low_latency_mode_ops = {
    ll_regions_plan,
    ll_dispatch_pack,
    ll_dispatch_eager_write,
    ll_dispatch_bulk_write,
    ll_dispatch_output_build,
    ll_combine_write,
    ll_combine_completions_expect,
    entry_combine_terms_build,
};

}  // namespace moerl::fabric::detail
