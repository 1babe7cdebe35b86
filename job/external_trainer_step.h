// The trainer step of a node whose learning runs in a user's process (`trainer.worker`,
// python/WORKERS.md): the runtime's driver (actors/trainer_role.cpp) is unchanged — it claims
// every batch's groups from the ledger, hands them to this step and confirms them to their
// shards once the step holds none — and this step passes each batch to the worker
// (workers/external_trainer.h). The groups handed since the worker's last `publish` are the
// step's held groups: a publish makes the next policy version from the worker's tensors and
// covers every group handed before it (so they are confirmed trained); a worker that dies
// holding groups fails the step, the driver's restart makes a new consumer incarnation and
// the shards serve those groups again (ledger/LEDGER.md, "Handed to a trainer"). A new worker
// resumes from the newest checkpoint it wrote (`checkpoint`), offered in its welcome.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "actors/job.h"
#include "common/config.h"
#include "store/object_store.h"

namespace moerl::job {

struct external_trainer_setup {
  // Makes `bytes` policy version `version` readable by the rollouts (a checkpoint cache, else
  // the store) with its store copy; returns how ("cache" or "store").
  std::function<result<std::string>(uint64_t version, std::shared_ptr<const std::string> bytes)>
      publish;
  std::shared_ptr<store::object_store> store;
  std::string store_prefix;  // job.store_prefix: checkpoints and the published-version marker
  nlohmann::json facts;      // the job's figures the report reads (task, reward_max, ...)
  uint64_t groups_per_iteration = 1;  // what the coordinator opens per policy iteration
  // The trainer group across nodes this node is member 0 of (trainer.group_size > 1), or
  // null; it outlives the step.
  actors::trainer_group* group = nullptr;
};

// errc::invalid_config when trainer.worker cannot run (a bad spec, trainer.group_size > 1
// without a formed group).
result<std::unique_ptr<actors::trainer_step>> make_external_trainer_step(
    const config& cfg, external_trainer_setup setup);

// A Python trainer group's member k > 0 (python/WORKERS.md, "Trainer groups"): takes member 0's
// rendezvous (the process group's address, the version and the checkpoint the incarnation
// resumes from), starts its own worker as rank k and serves its checkpoint shards until member
// 0 stops the group (ok), the group breaks or the worker dies (the error says which).
// setup.publish is not used (rank 0 publishes).
status serve_external_trainer_member(const config& cfg, external_trainer_setup setup,
                                     actors::trainer_group& group);

}  // namespace moerl::job
