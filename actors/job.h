// What a job plugs into the generic runtime: the prompts, the rollout work, the reward and
// the trainer's step. Leasing, fencing, the sample plane and supervision never look inside.
// The default is the deterministic modpow test job (actors/modpow_job.cpp); the GRPO job
// on the MoE policy lives in job/ and is selected by `job.kind` (apps/ passes its factory
// to the node runtime, so actors/ does not depend on the policy).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/rollout_work.h"
#include "common/config.h"
#include "common/error.h"
#include "messages/sample.h"
#include "messages/weights.h"

namespace moerl::actors {

struct train_result {
  uint64_t groups = 0;                  // groups this call consumed
  uint64_t bad = 0;                     // samples refused (malformed; counted, not trained)
  bool new_version = false;             // the call produced a new policy version
  messages::weight_manifest manifest;   // the new version (when new_version)
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
  // Trainer rank 0's step; nullptr: the runtime's built-in verification step
  // (actors/trainer_check.h), spread over the trainer ranks.
  virtual result<std::unique_ptr<trainer_step>> make_trainer() = 0;
};

// Builds the job a node runs, from its config and role.
using job_factory = std::function<result<std::shared_ptr<job>>(const config& cfg, const std::string& role)>;

// The deterministic test job: modpow work, its verifier, trainer_check.
std::shared_ptr<job> make_modpow_job(const config& cfg);

}  // namespace moerl::actors
