// The main job: GRPO on the MoE policy (policy/) plugged into the generic runtime
// (actors/job.h). Which job a node runs is `job.kind`: "grpo" (default) or "modpow" (the
// deterministic test job, job/modpow_job.h).
//
// How the pieces meet:
//   prompts   a pure function of (grpo.seed, group id), so any node rebuilds them;
//   rollout   each worker holds a policy replica; a lease names the policy version to use,
//             the worker loads that version's weights from the object store (verifying the
//             content hash) and generates a whole group at once (G rows, KV cache);
//   reward    the task's verifier or the learned reward model (task.reward);
//   trainer   rank 0 collects one policy iteration of groups (actors.units_per_iteration x
//             actors.groups_per_unit), takes one GRPO step (grpo.epochs Adam passes),
//             publishes the new version's weights to the store and announces it, and
//             writes a durable checkpoint of it (parameters, Adam moments, reward curve;
//             every job.checkpoint_every-th and the newest are kept) that a recreated
//             trainer and `moerl up --resume` continue from.
// Weights and checkpoints live under job.store_prefix in the store (store.url).
#pragma once

#include <memory>
#include <string>

#include "actors/job.h"
#include "common/config.h"

namespace moerl::job {

// The job.kind a node runs. errc::invalid_config names a bad key.
result<std::shared_ptr<actors::job>> make_job(const config& cfg, actors::node_role role);

// Store keys (exposed for tests and `moerl up --resume`).
std::string weights_key(const std::string& prefix, uint64_t version);
std::string checkpoint_prefix(const std::string& prefix);

}  // namespace moerl::job
