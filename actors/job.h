// What a job plugs into the generic runtime: the prompts, the rollout work, the reward and
// the trainer's step. Leasing, fencing, the sample plane and supervision never look inside.
// The jobs live in job/ (GRPO on the MoE policy, and the deterministic modpow test job),
// selected by `job.kind` in job::make_job; apps/ passes that factory to the node runtime,
// so actors/ depends on no job.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/node_role.h"
#include "actors/rollout_work.h"
#include "common/config.h"
#include "common/error.h"
#include "messages/sample.h"
#include "messages/weights.h"

namespace moerl::actors {

struct train_result {
  uint64_t groups = 0;                 // groups this call consumed
  uint64_t bad = 0;                    // samples refused (malformed; counted, not trained)
  bool new_version = false;            // the call produced a new policy version
  messages::weight_manifest manifest;  // the new version (when new_version)
  double sum_abs_advantage = 0;        // sum of |advantage| over the samples (0: not computed)
};

// The ranks of a trainer node (actors.trainer_ranks, each its own supervised actor), for a
// step that spreads its work over them. Owned by the runtime; it outlives the step, also
// across a restart of the trainer group. Call it only from the thread that calls the step.
class trainer_ranks {
 public:
  virtual ~trainer_ranks() = default;
  virtual uint32_t num_ranks() const = 0;
  // Runs work[r] on rank r for every r < num_ranks() (work[0] on the calling thread), one
  // rank after another, and returns when all are done. An error when a rank did not answer:
  // the step should fail with it, so the whole trainer group restarts (one_for_all) rather
  // than go on with a missing rank.
  virtual status run_on_ranks(const std::vector<std::function<void()>>& work) = 0;
};

// Trainer rank 0's learning step. Called from one thread, one batch at a time; a batch is
// whole prompt groups. It may hold groups back until it has a full policy iteration.
class trainer_step {
 public:
  virtual ~trainer_step() = default;
  // An empty `samples` is a flush: no batch arrived for actors.trainer_flush_ms, so the step
  // should use whatever it holds.
  virtual result<train_result> train(const std::vector<messages::sample>& samples) = 0;
  // The policy version the step's weights are at (non-zero after a resume from a checkpoint).
  virtual uint64_t version() const = 0;
  // Groups train() took that no policy version includes yet. When it is 0, every batch the
  // step was given is in its weights: the runtime confirms them to their shards (until then
  // they stay handed there, and a new trainer incarnation is served them again).
  virtual uint64_t num_held_groups() const = 0;
  // Job figures for progress and the report (reward curve, timings), as JSON.
  virtual nlohmann::json stats() const = 0;
};

class job {
 public:
  virtual ~job() = default;
  virtual std::string name() const = 0;
  // The prompt of a prompt group, a pure function of the group id (any node can rebuild it).
  virtual result<std::vector<uint32_t>> prompt(uint64_t group_id) const = 0;
  // One per rollout worker (each used by one thread).
  virtual result<std::unique_ptr<rollout_work>> make_rollout_work() = 0;
  virtual result<std::unique_ptr<reward_function>> make_reward() = 0;
  // Trainer rank 0's step (never null). `ranks` stays valid for the step's whole life; a
  // step that does all its work on rank 0 may ignore it.
  virtual result<std::unique_ptr<trainer_step>> make_trainer(trainer_ranks& ranks) = 0;
};

// Builds the job a node runs, from its config and role.
using job_factory = std::function<result<std::shared_ptr<job>>(const config& cfg, node_role role)>;

}  // namespace moerl::actors
