// The actors each role runs under its node's supervisor, as child specs:
//   rollout  N workers (actors.rollout_workers), one_for_one, transient: lease a unit,
//            generate its samples with the rollout_work, push them to the reward hop (or,
//            with no reward node alive, score locally and send to the shard), report.
//            (rollout_role.cpp)
//   reward   one scorer, one_for_one: pull, score (reward_function), forward with credits.
//   env      a router and env.workers environment actors, one_for_one: the router owns the
//            node's ROUTER socket and gives each session to one environment actor, which
//            runs its episode's reset and steps (env_role.cpp, env/ENV.md).
//   buffer   one shard loop: pumps the shard_service, applies ledger events, reports
//            acks/consumption/stats to the coordinator (with retries: they must arrive).
//   weights  one version store, one_for_one: tracks the published policy versions.
//            (reward, buffer, weights: service_roles.cpp)
//   trainer  R ranks (actors.trainer_ranks), one_for_all: rank 0 pulls batches from every
//            shard and runs the job's trainer_step on them, which may spread its work over
//            the ranks (trainer_ranks, job.h); rank 0 publishes each new policy version the
//            step makes. (trainer_role.cpp)
// The loops and what they share: role_loops.h; this file's .cpp builds the child specs.
// Role loops are blocking actors (each on its own thread): they block in ZeroMQ and in the
// work function, and check their mailbox between steps (shutdown_atom ends them).
#pragma once

#ifndef MOERL_INSIDE_moerl_actors
#error \
    "actors/internal/node_roles.h is private to moerl_actors (actors/): include its public headers"
#endif

#include <memory>
#include <vector>

#include "actors/internal/node_context.h"
#include "actors/node_role.h"
#include "actors/supervisor.h"

namespace moerl::actors {

std::vector<child_spec> role_children(const std::shared_ptr<node_context>& ctx);
restart_strategy role_strategy(node_role role);

}  // namespace moerl::actors
