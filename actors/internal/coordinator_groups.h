// The coordinator actor's side of groups across nodes: the gjoin / gview / ggather / gfailed /
// grestored requests (atoms.h) turned into node_group_core calls, and the all-gather calls
// waiting for their round, answered when it completes or fails. Kept out of coordinator.cpp
// so the actor only routes messages here.
#pragma once

#ifndef MOERL_INSIDE_moerl_actors
#error \
    "actors/internal/coordinator_groups.h is private to moerl_actors (actors/): include its public headers"
#endif

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <caf/response_promise.hpp>

#include "actors/coordinator_core.h"

namespace moerl::actors {

struct group_gathers {
  std::map<uint64_t, caf::response_promise> waiting;  // request id -> the caller's reply
  uint64_t next_request = 1;
};

// "" when the node joined, else an encoded error naming why it was refused.
std::string group_join(coordinator_core& core, const std::string& node_id, const std::string& group,
                       const std::string& role, uint32_t size, uint32_t ranks_per_node,
                       const std::string& model_shape, const std::string& config_hash,
                       const std::string& version);
// [] while the node's group is forming, else [group, incarnation, member index, size,
// ranks per node, member names...] (node_group_member.cpp parses it).
std::vector<std::string> group_view_reply(const coordinator_core& core, const std::string& node_id);
// One all-gather call; `rp` is answered when its round completes or the group breaks.
// `participants`: comma-separated ints.
void group_gather(coordinator_core& core, group_gathers& g, caf::response_promise rp,
                  const std::string& node_id, uint64_t incarnation, const std::string& channel,
                  const std::string& participants, int32_t self, std::string payload);
// Answers the calls whose groups broke (after a node_down, a gfailed, a tick).
void answer_failed_gathers(coordinator_core& core, group_gathers& g);

}  // namespace moerl::actors
