// The coordinator actor: CAF front of coordinator_core. It publishes nothing itself (the node
// runtime publishes it), monitors every registered node agent, runs the core's tick every
// 100 ms and delivers the core's outbound messages to node agents.
//
// Group commit: handlers change the ledger without syncing it; the first one queues a
// flush_atom behind every request already waiting in the mailbox; the flush syncs the
// journal once and only then answers all of them (a lease or commit is never answered
// before it is durable).
//
// Control-plane protocol (every payload is an atom, an integer or moerl_messages bytes; the
// core's typed results are encoded here, at the edge):
//   (register_atom, heartbeat bytes, agent actor) -> ""  | error bytes
//   (heartbeat_atom, heartbeat bytes) -> "" (counted alive) | error bytes (peer_dead: fenced, exit)
//   (lease_atom, lease_request bytes)             -> lease bytes | error bytes
//   (leases_atom, lease_request bytes)            -> lease_batch bytes | error bytes
//        up to min(max_units, actors.lease_batch) leases
//   (giveback_atom, lease_give_back bytes)        -> "" | error bytes of the first refusal
//   (report_atom, unit_report bytes)              -> ""  | error bytes
//   (shardrep_atom, shard_reports bytes)          -> shard_reports_reply bytes | error bytes
//        a shard's acks and hand-out steps (ledger::handout_step), each recorded in order;
//        the reply says per item whether the ledger refused it
//   (claim_atom, trainer_claim bytes)             -> trainer_claim_reply bytes | error bytes
//        answered once durable; the trainer trains only the groups granted
//   (stats_atom, node id, JSON text)
//   (version_atom, version, weight_manifest bytes)
//   (drained_atom, node id, JSON record)          -> ""
//   (gaveup_atom, node id, cause)                 -> ""   the node exits non-zero next
//   (admin_atom, admin_request bytes)             -> admin_reply bytes
// and to node agents:
//   (event_atom, ledger_events bytes)   shards only: every event one flush released
//   (clost_atom, trainer consumer name, incarnation bound)   shards only: that consumer is lost
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
