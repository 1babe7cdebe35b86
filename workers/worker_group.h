// A group of external worker processes, one per member node of a group across nodes (a
// Python trainer group, a Python rollout group: python/WORKERS.md): where their
// torch.distributed process group meets. Member 0's node picks a free TCP port on its host and
// tells every member in the group's first "members" round (the rendezvous); each node's welcome
// then gives its worker its place, {rank, world_size, addr, port, incarnation}, and the SDK
// makes the gloo group there. The node picks the port, not rank 0's worker, so the address is
// known before any worker starts and travels on a round that exists anyway; a port taken in
// the moment between fails rank 0's start, which re-forms the group with a new one.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/config.h"
#include "common/error.h"

namespace moerl::workers {

// What member 0 tells every member once per incarnation. A trainer group's also names the
// version its workers continue from and the committed checkpoint every rank resumes its own
// shard of (0: none); a rollout group's leaves them 0.
struct group_rendezvous {
  std::string addr;
  uint64_t port = 0;
  uint64_t version = 0;
  uint64_t resume_step = 0;
  uint64_t incarnation = 0;
};

// Member 0's rendezvous for `incarnation`: node.host (this host's name when the node listens
// on every interface) and a port free there now; its error reads "rendezvous: ..." for the
// caller to name its group before.
result<group_rendezvous> pick_rendezvous(const config& cfg, uint64_t incarnation);

nlohmann::json to_json(const group_rendezvous& r);
// Member 0's first round as a member k > 0 received it; `group` ("trainer group", "rollout
// group") names the group in the error.
result<group_rendezvous> parse_rendezvous(const std::string& bytes, const std::string& group);

// The welcome's "group": rank `rank` of `world` meeting at the rendezvous.
nlohmann::json group_place(const group_rendezvous& r, uint32_t rank, uint32_t world);

}  // namespace moerl::workers
