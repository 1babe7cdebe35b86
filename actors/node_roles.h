// The actors each role runs under its node's supervisor, as child specs:
//   rollout  N workers (actors.rollout_workers), one_for_one, transient: lease a unit,
//            generate its samples with the rollout_work, push them to the reward hop (or,
//            with no reward node alive, score locally and send to the shard), report.
//   reward   one scorer, one_for_one: pull, score (reward_function), forward with credits.
//   env      one prompt server, one_for_one: answers (work_atom, group) with the prompt.
//   buffer   one shard loop: pumps the shard_service, applies ledger events, reports
//            acks/consumption/stats to the coordinator (with retries: they must arrive).
//   trainer  R ranks (actors.trainer_ranks), one_for_all: rank 0 pulls batches from every
//            shard and splits the groups over the ranks; every rank verifies its samples
//            with the checker and computes group-relative advantages; rank 0 publishes a
//            new policy version per iteration's worth of groups.
//   weights  one version store, one_for_one: tracks the published policy versions.
// Role loops are blocking actors (each on its own thread): they block in ZeroMQ and in the
// work function, and check their mailbox between steps (shutdown_atom ends them).
#pragma once

#include <memory>
#include <vector>

#include "actors/node_context.h"
#include "actors/supervisor.h"

namespace moerl::actors {

std::vector<child_spec> role_children(const std::shared_ptr<node_context>& ctx);
restart_strategy role_strategy(const std::string& role);

}  // namespace moerl::actors
