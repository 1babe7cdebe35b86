// The baseline mode (a generic padded all-to-all, "without specialised EP"): one row per
// (token, expert) entry, no deduplication, and every rank writes to every rank a block of
// the step's largest per-pair row count, padding included, dispatch and combine alike
// (PROTOCOL.md, "baseline").
#include "fabric/internal/ep_group_impl.h"

namespace moerl::fabric::detail {

namespace {

ep_region_sizes baseline_regions_plan(ep_group_impl& g) { return entry_regions_plan(g, 1); }

// Padded blocks wait for the count exchange: their size is the step's largest count.
status baseline_dispatch_eager_write(ep_group_impl&) { return {}; }

// To every rank its staging block, num_padded_rows rows of row_bytes, into our block of its
// region; dispatch and combine alike.
status padded_blocks_write(ep_group_impl& g, int64_t row_bytes, remote_region peer_regions::*region,
                           proto::imm_kind kind, uint64_t& wire, uint64_t& writes) {
  const int64_t block_bytes = g.max_rows_per_peer * row_bytes;
  for (int d = 0; d < g.num_ranks; ++d)
    if (auto st =
            g.write_chunked(d, g.staging.data() + d * block_bytes, g.num_padded_rows * row_bytes,
                            g.peers[d].*region, g.rank * block_bytes, kind, wire, writes);
        !st)
      return st;
  return {};
}

status baseline_dispatch_bulk_write(ep_group_impl& g, std::vector<int64_t>& expected) {
  if (auto st = padded_blocks_write(g, g.row_bytes, &peer_regions::dispatch, proto::imm_dispatch,
                                    g.step_bytes.dispatch_wire, g.step_bytes.dispatch_writes);
      !st)
    return st;
  for (int s = 0; s < g.num_ranks; ++s) expected[s] = g.chunks(g.num_padded_rows * g.row_bytes);
  return {};
}

status baseline_dispatch_output_build(ep_group_impl& g) { return entry_output_build(g, 0); }

// Padded blocks back: the block for s holds the outputs in the order s sent the entries.
status baseline_combine_write(ep_group_impl& g, const char* expert_out) {
  if (auto st = entry_outputs_stage(g, expert_out); !st) return st;
  return padded_blocks_write(g, g.hidden_bytes, &peer_regions::combine, proto::imm_combine,
                             g.step_bytes.combine_wire, g.step_bytes.combine_writes);
}

void baseline_combine_completions_expect(const ep_group_impl& g, std::vector<int64_t>& expected) {
  for (int d = 0; d < g.num_ranks; ++d) expected[d] = g.chunks(g.num_padded_rows * g.hidden_bytes);
}

}  // namespace

const ep_mode_ops baseline_mode_ops = {
    baseline_regions_plan,
    entry_rows_pack,
    baseline_dispatch_eager_write,
    baseline_dispatch_bulk_write,
    baseline_dispatch_output_build,
    baseline_combine_write,
    baseline_combine_completions_expect,
    entry_combine_terms_build,
};

}  // namespace moerl::fabric::detail
