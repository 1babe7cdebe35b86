// One simulated rollout node of `moerl bench fleet`: an event-based actor that speaks the
// rollout node's real control-plane protocol to the coordinator (actors/coordinator.h) and
// the real sample plane to the buffer shards (ledger/sample_plane.h), so the coordinator
// cannot tell it from a `moerl node --role rollout` process with one worker:
//   - its own random node id, registered with itself as the node agent (the coordinator
//     monitors it, sends it notices and kill signals);
//   - a heartbeat request every node.heartbeat_interval_ms;
//   - a lease loop (K = actors.lease_batch units per request): each unit is "generated" for
//     `unit_ms` of simulated time, then its samples are made by the job's real rollout work
//     (job.kind=modpow: the trainer verifies every one), scored, sent to the lease's shard over
//     its own ZeroMQ producer with the lease's fencing attempt, and reported;
//   - a Spot notice drains it as rollout_role.cpp does (finish the unit in hand if it ends
//     before the deadline minus the margin, else give it back; then `drained` and leave);
//   - a kill (the host's sim_kill_atom, or the coordinator's kill_atom) ends it at once with
//     exit_reason::kill, as a SIGKILLed process's link would.
// What differs from a real node is only where the generation time goes (a timer instead of a
// model) and that many such nodes share one process and its CAF connection.
#pragma once

#include <cstdint>
#include <memory>

#include <caf/atom.hpp>
#include <caf/fwd.hpp>

#include "actors/job.h"
#include "bench/fleet/fleet_record.h"
#include "zmq/context.h"

namespace moerl::bench {

struct sim_node_options {
  int64_t unit_ms = 1000;      // simulated generation time of one unit
  uint32_t lease_batch = 1;    // K: units asked for per lease request
  int64_t heartbeat_ms = 500;  // node.heartbeat_interval_ms
  int64_t request_timeout_ms = 5000;
  int64_t drain_margin_ms = 300;  // a unit is finished under a notice only if it ends this early
  int64_t start_delay_ms = 0;     // spreads the fleet's first leases over one unit time
};

// Spawns one simulated node against `coordinator`. `job` makes its rollout work and reward
// (shared read-only); `zmq` is the host's context; `rec` is the host's record.
caf::actor spawn_sim_node(caf::actor_system& sys, const caf::actor& coordinator,
                          std::shared_ptr<actors::job> job, std::shared_ptr<zmq::zmq_context> zmq,
                          std::shared_ptr<fleet_record> rec, sim_node_options opts);

// Messages a host sends its nodes (they stay in the process: atoms only).
//   (sim_kill_atom)                                  die now, holding what it holds
//   (notice_atom, interruption_notice bytes)         the same message the coordinator forwards
using sim_kill_atom = caf::atom_constant<caf::atom("simkill")>;

}  // namespace moerl::bench
