// A sharded checkpoint (job/shard_checkpointer.h: "shard-<k>/rank-<R>/params|adam" parts) put
// back together as the whole model and the whole Adam state, for a trainer of another shape
// than the one that wrote it (job.resume_from across shapes: a trainer group's run resumed by
// one process, or the reverse). Rank shares are laid out as the writer's rank layout, which
// the params bytes carry; the whole layout is the reader's (the same model config).
#pragma once

#include <string>
#include <vector>

#include "common/error.h"
#include "policy/params.h"
#include "store/checkpoint.h"

namespace moerl::job {

struct whole_state {
  std::string params;  // policy/params.h bytes of every expert, laid out by full_layout
  std::string adam;    // policy/adam.h bytes of the whole moments
};

// `parts`: every part of the checkpoint (store::read_checkpoint), num_ranks: its meta's.
// An error names a missing or malformed rank part.
result<whole_state> assemble_whole_state(const std::vector<store::checkpoint_part>& parts,
                                         int num_ranks, const policy::param_layout& full_layout);

}  // namespace moerl::job
