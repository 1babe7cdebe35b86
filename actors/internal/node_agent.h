// A node's agent: the one actor the coordinator knows of a node. It registers (with the
// node's own random id), heartbeats, keeps the node's supervisor (and through it the role
// actors), reconnects when the coordinator restarts, and runs the drain protocol:
//   interruption_notice{deadline} (IMDS, SIGTERM, console) -> stop leasing; finish units
//   that fit before deadline - actors.drain_margin_ms; return the rest; flush; report the
//   interruption to the coordinator (deregistration); exit 0.
// It also carries out console injections (kill_atom: raise a signal in this process) and
// routes ledger events and policy versions to the role actors through node_context.
#pragma once

#ifndef MOERL_INSIDE_moerl_actors
#error \
    "actors/internal/node_agent.h is private to moerl_actors (actors/): include its public headers"
#endif

#include <memory>

#include <caf/fwd.hpp>

#include "actors/internal/node_context.h"

namespace moerl::actors {

// Spawned detached (it blocks while reconnecting). The node process ends when it quits;
// ctx->exit_code then holds the process exit status.
caf::actor spawn_node_agent(caf::actor_system& sys, std::shared_ptr<node_context> ctx,
                            std::shared_ptr<std::atomic<int>> exit_code);

}  // namespace moerl::actors
