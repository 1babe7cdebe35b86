// The trainer claims before it trains (ledger/LEDGER.md, "Claimed before trained"): before
// its step uses a batch, rank 0 asks the coordinator's ledger which of the batch's groups it
// may train, in one round trip per step. A group the ledger re-opened after its shard was
// declared lost is refused (its regenerated copy is trained instead), so no group is trained
// twice; a group the ledger granted stays this trainer's even if its shard is lost, and the
// trainer confirms it to the ledger itself once a policy version has it.
#pragma once

#ifndef MOERL_INSIDE_moerl_actors
#error \
    "actors/internal/trainer_claim.h is private to moerl_actors (actors/): include its public headers"
#endif

#include <cstdint>
#include <string>
#include <vector>

#include <caf/fwd.hpp>

#include "actors/internal/node_context.h"
#include "common/error.h"
#include "messages/sample.h"
#include "messages/shard.h"

namespace moerl::actors {

// The groups of a batch in the order their samples appear, each with the hand-out id the
// shard gave it. errc::malformed_message when the batch's handouts do not match its groups.
result<std::vector<messages::handed_group>> handed_groups_of(const messages::batch& b);

// The batch's samples of the granted groups (`granted[i]` for `groups[i]`).
std::vector<messages::sample> granted_samples(const messages::batch& b,
                                              const std::vector<messages::handed_group>& groups,
                                              const std::vector<bool>& granted);

// Sends `claims` and `confirmed` for this node's consumer and incarnation, asking again
// until the coordinator answers (the ledger takes a repeated claim once). The grants, one per
// claim; errc::shutting_down when the node stops or drains first.
result<std::vector<bool>> claim_groups(caf::blocking_actor* self, node_context& ctx,
                                       const std::vector<messages::handed_group>& claims,
                                       const std::vector<messages::handed_group>& confirmed);

}  // namespace moerl::actors
