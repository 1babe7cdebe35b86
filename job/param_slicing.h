// Moving weights between the full parameter set (what the trainer publishes: every expert)
// and one expert-parallel rank's share (dense tensors plus its contiguous block of experts),
// through policy/params.h's public layout only: policy/ has no slice loader, so it lives here.
//
// The rule, per tensor of the rank's layout: a tensor whose shape equals the full tensor of
// the same name is dense (every rank holds all of it); a tensor whose leading dimension is
// the full one divided by num_ranks (and whose other dimensions match) is an expert tensor
// split contiguously, rank r holding leading rows [r * local, (r + 1) * local) — the same
// ownership rule as policy/expert_exchange.h. Anything else is an error naming the tensor.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "policy/params.h"

namespace moerl::job {

// Rank `rank`'s share of `full` (laid out by full_layout), laid out by rank_layout.
result<std::vector<float>> slice_params(const policy::param_layout& full_layout,
                                        const std::vector<float>& full,
                                        const policy::param_layout& rank_layout, int rank,
                                        int num_ranks);

// The inverse: the full parameter set from every rank's share (rank_params[r] laid out by
// rank_layout, the same layout on every rank). Dense tensors are taken from rank 0 (after a
// dense all-reduce every rank holds the same values).
result<std::vector<float>> assemble_params(const policy::param_layout& full_layout,
                                           const policy::param_layout& rank_layout,
                                           const std::vector<std::vector<float>>& rank_params);

// The rank layout's dense tensors (every rank holds them whole; their gradients are
// all-reduced) as [offset, offset + size) ranges of the rank's buffer, in layout order.
result<std::vector<std::pair<size_t, size_t>>> dense_ranges(const policy::param_layout& full_layout,
                                                            const policy::param_layout& rank_layout,
                                                            int num_ranks);

// The complement of dense_ranges in a rank buffer of `count` floats: its expert tensors (the
// part that differs between ranks), as [offset, offset + size) ranges in layout order.
std::vector<std::pair<size_t, size_t>> expert_ranges(
    const std::vector<std::pair<size_t, size_t>>& dense, size_t count);

// The same two moves for Adam's state, in policy/adam.h's documented checkpoint format
// ("MOERLADM" | u64 steps | u64 n | fp32 m[n] | fp32 v[n]): a checkpoint holds the full
// moments; each trainer rank's optimiser holds its share's.
result<std::string> slice_adam_state(const std::string& full_bytes,
                                     const policy::param_layout& full_layout,
                                     const policy::param_layout& rank_layout, int rank,
                                     int num_ranks);
result<std::string> assemble_adam_state(const std::vector<std::string>& rank_bytes,
                                        const policy::param_layout& full_layout,
                                        const policy::param_layout& rank_layout);

}  // namespace moerl::job
