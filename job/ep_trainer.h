// The trainer's GRPO step on an expert-parallel group of rank threads (job/ep_policy_group.h
// with dense collectives): the batch split over the ranks, forward/backward in the normal
// mode with each rank holding only its experts, dense gradients all-reduced with
// fabric/collectives.h, expert gradients kept where their experts live, Adam per rank, and
// the full parameter set re-assembled for publication.
//
// Why it equals the single-rank step: the GRPO loss is a mean over ALL samples, but
// policy::grpo_gradient takes the mean over the samples it is given. Rank r therefore
// scales its samples' advantages (and kl_coef) by n_r / N: the surrogate is linear in the
// advantage (and a positive scale keeps every clip decision), so the ranks' losses sum to
// the single-rank loss, their dense gradients sum to its dense gradient, and each expert's
// gradient (accumulated on its owner from every rank's tokens) is its gradient too. The
// global gradient norm for clipping is the dense part's plus the all-reduced sum of each
// rank's expert part, so every rank clips by the same factor and Adam (element-wise) gives
// the single-rank update. The one term that is not exact: the MoE load-balance loss is
// computed per forward, i.e. over each rank's tokens; each rank weighs it by 1 / num_ranks
// (model aux_loss_coef / num_ranks), the usual micro-batch approximation.
//
// Device (job.device=cuda): each rank's forward, backward and Adam run on its device policy,
// the packed dense gradients (and the expert squared norm) are all-reduced with NCCL on device
// buffers, Adam clips by the global norm inside its update, and the step's batch and the
// parameter shares cross by NCCL broadcasts (job/internal/ep_device_rank.h, which lists the
// host copies). grpo.kl_coef > 0 is refused there as here.
//
// Threading: one owner thread (the trainer actor).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/config.h"
#include "common/error.h"
#include "policy/adam.h"
#include "policy/grpo.h"
#include "policy/model.h"
#include "policy/trainer.h"

namespace moerl::fabric {
class bootstrap;
}

namespace moerl::job {

// A named blob of trainer state: a checkpoint shard's part ("rank-3/params", "rank-3/adam").
struct state_part {
  std::string name;
  std::string bytes;
};

// What a member other than member 0 does with its own state (job/grpo_job.cpp gives the store
// behind them): each step's answer round carries what after_step returns (its checkpoint
// shard's size and hash, and with sharded publication its weight shards' size, sha256 and
// cache: job/sharded_publication.h; never the state itself), and a restore command names only the
// version whose shard each member reads itself.
struct ep_member_hooks {
  // After the step that made `version`: hand the member's state to its background writer.
  std::function<result<nlohmann::json>(uint64_t version)> after_step;
  // Load this member's shard of checkpoint `version` under job prefix `prefix`; then, when
  // as_version differs, write it again as the shard of as_version (the restored state renumbered:
  // job/README.md). Version 0: nothing to read (member 0 loaded a checkpoint of another shape
  // whole into the group); write the member's state as the shard of as_version.
  std::function<status(const std::string& prefix, uint64_t version, uint64_t as_version)> restore;
};

struct ep_step_result {
  policy::update_stats update;  // clip fraction token-weighted over ranks; loads averaged
  double grad_norm = 0;         // global, before clipping
};

// The trainer's EP group spanning node processes (a trainer group across nodes, actors/job.h
// trainer_group): member k's process holds global ranks k * ranks_per_member + [0,
// ranks_per_member). Member 0's process drives: before each group operation it sends the
// command (a step's batch, a parameter or optimiser gather, a load) to the other members
// over members_allgather; they run serve(), which takes their part of each command.
struct ep_trainer_span {
  int member_index = 0;
  int num_members = 1;
  int ranks_per_member = 1;
  // The fabric bootstrap of a global rank (the control plane's).
  std::function<std::unique_ptr<fabric::bootstrap>(int rank)> make_bootstrap;
  // All-gather of one contribution per member process, in member order.
  std::function<result<std::vector<std::string>>(const std::string& mine, int64_t timeout_ms)>
      members_allgather;
  // Raised when the group lost a member (actors/job.h trainer_group::abort_flag): the ranks'
  // fabric waits inside a step end at once instead of at fabric.op_timeout_ms.
  std::shared_ptr<const std::atomic<bool>> abort;
};

class ep_trainer {
 public:
  // max_samples_per_step bounds one step's batch (sizes the normal group's buffers).
  static result<std::unique_ptr<ep_trainer>> create(
      const config& cfg, const policy::model_config& model, const policy::grpo_config& grpo,
      const policy::adam_config& adam, float temperature, int num_ranks,
      int64_t max_samples_per_step, const ep_trainer_span* span = nullptr);
  ~ep_trainer();

  // grpo.epochs passes over the batch; at least num_ranks samples. A step that failed
  // inside the group (a rank timed out mid-collective) leaves it broken; the next step first
  // rebuilds the group and carries the parameters and Adam state over (every rank stops
  // at the same collective, so they are consistent: with grpo.epochs = 1 they are exactly
  // the state before the failed step).
  // `version`: the policy version the step makes (members write their checkpoint shards
  // under it).
  // `before_answers` (member 0 of a spanning group): run once the step's state is complete
  // here (serialize() sees the new version) and before the answer round, so member 0's own
  // work on the version (pushing its shards) overlaps the other members' after_step instead
  // of following it. Its error is the step's.
  result<ep_step_result> step(const std::vector<policy::sample>& samples,
                              const std::vector<double>& advantages, uint64_t version = 0,
                              const std::function<status()>& before_answers = {});

  // A member other than member 0 of a spanning group: takes its part in every command member
  // 0 sends, until it sends stop (ok) or the group breaks (the error).
  status serve(const ep_member_hooks& hooks = {});
  // Member 0: has every other member run hooks.restore(version, as_version); the first
  // member's failure is the error.
  status restore_members(const std::string& prefix, uint64_t version, uint64_t as_version);
  // The last step's answers from members 1.. (after_step's JSON, member order).
  const std::vector<nlohmann::json>& member_answers() const;
  // Member 0: bytes through the coordinator's rounds since the last step began (what every
  // member sent plus what the coordinator sent back to every member): the control plane's
  // cost of one policy version.
  uint64_t coordinator_bytes() const;

  // This process's ranks' state as checkpoint parts: "rank-<R>/params" (params.h bytes of
  // rank R's share, in the rank layout) and "rank-<R>/adam" (its Adam moments). Loading takes
  // the same parts (an error names a missing or malformed one).
  result<std::vector<state_part>> local_state() const;
  status load_local_state(const std::vector<state_part>& parts);
  // This process's ranks' parameter shares, {global rank, params.h bytes in the rank layout}:
  // what a member publishes as its shards of a version (job/sharded_publication.h).
  result<std::vector<std::pair<int, std::string>>> own_shares() const;
  int num_ranks() const;
  // The whole model's layout (every expert).
  const policy::param_layout& full_layout() const;
  // Member 0: tells the other members to leave serve() (the destructor does it too).
  void stop_members();

  // Tests only: breaks the group the way a dying peer does (the last rank fails while the
  // others wait in a dense all-reduce until fabric.op_timeout_ms); returns that failure.
  status break_group_for_test();

  // This process's first rank's expert plane: {provider, peer_paths [one per global rank]}.
  nlohmann::json expert_plane() const;

  // The full parameter set (every expert) in params.h's format, and back.
  result<std::string> serialize() const;
  status load(const std::string& bytes);
  // The full Adam state (policy/adam.h's format), and back.
  result<std::string> serialize_adam() const;
  status load_adam(const std::string& bytes);

 private:
  struct impl;
  explicit ep_trainer(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace moerl::job
