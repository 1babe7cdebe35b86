// The coordinator actor: CAF front of coordinator_core. It publishes nothing itself (the node
// runtime publishes it), monitors every registered node agent, runs the core's tick every
// 100 ms and delivers the core's outbound messages to node agents.
//
// Control-plane protocol (every payload is an atom, an integer or moerl_messages bytes):
//   (register_atom, heartbeat bytes, agent actor) -> ""  | error bytes
//   (heartbeat_atom, heartbeat bytes)
//   (lease_atom, lease_request bytes)             -> lease bytes | error bytes
//   (report_atom, unit_report bytes)              -> ""  | error bytes
//   (ack_atom, unit, attempt, shard, packed accepted groups, packed stale groups)
//   (consumed_atom, unit, attempt, group, num_samples, handout)
//   (stats_atom, node id, JSON text)
//   (version_atom, version, weight_manifest bytes)
//   (drained_atom, node id, JSON record)          -> ""
//   (admin_atom, admin_request bytes)             -> admin_reply bytes
// and to node agents:
//   (event_atom, kind, unit, attempt, packed groups, group_size)   shards only
//   (version_atom, version)   (notice_atom, interruption_notice bytes)
//   (kill_atom, signal)       (shutdown_atom)
#pragma once

#include <memory>

#include <caf/fwd.hpp>

#include "actors/coordinator_core.h"

namespace moerl::actors {

// The actor owns `core`; it quits (normally) 500 ms after a console `shutdown`.
caf::actor spawn_coordinator(caf::actor_system& sys, std::unique_ptr<coordinator_core> core);

}  // namespace moerl::actors
