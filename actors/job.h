// What a job plugs into the generic runtime: the prompts, the rollout work, the reward and
// the trainer's step. Leasing, fencing, the sample plane and supervision never look inside.
// The jobs live in job/ (GRPO on the MoE policy, and the deterministic modpow test job),
// selected by `job.kind` in job::make_job; apps/ passes that factory to the node runtime,
// so actors/ depends on no job.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/node_role.h"
#include "actors/rollout_work.h"
#include "common/config.h"
#include "common/error.h"
#include "env/env_api.h"
#include "messages/sample.h"
#include "messages/weights.h"
#include "weights/cache_directory.h"

namespace moerl::actors {

struct train_result {
  uint64_t groups = 0;                 // groups this call consumed
  uint64_t bad = 0;                    // samples refused (malformed; counted, not trained)
  bool new_version = false;            // the call produced a new policy version
  messages::weight_manifest manifest;  // the new version (when new_version)
  double sum_abs_advantage = 0;        // sum of |advantage| over the samples (0: not computed)
};

// A group that spans node processes (trainer.group_size > 1, or a rollout EP group of
// rollout.group_size > 1 rollout nodes), as a member sees it:
// its member index, the group's incarnation and an all-gather among the members' processes
// carried by the control plane (the coordinator's node_group_core). The job uses it to run
// its step across the members (rank 0's process drives, the others follow) and, on the
// "fabric" channel, as the fabric bootstrap of one EP group over every member's ranks.
class trainer_group {
 public:
  virtual ~trainer_group() = default;
  virtual uint32_t member_index() const = 0;
  virtual uint32_t num_members() const = 0;
  virtual uint32_t ranks_per_member() const = 0;  // global ranks of member k: k * this + [0, this)
  virtual uint64_t incarnation() const = 0;       // 1, +1 per re-formation
  // channel "members": participants are member indices; "fabric": global ranks. Rounds among
  // the same participants are matched by call order. Fails (peer_dead) when the group broke.
  virtual result<std::vector<std::string>> allgather(const std::string& channel,
                                                     const std::vector<int>& participants, int self,
                                                     const std::string& mine,
                                                     int64_t timeout_ms) = 0;
  // Raised (from another thread) once the group broke: the step's fabric waits end at once
  // (fabric::transport_options::abort), so a lost member costs the re-formation only, not
  // fabric.op_timeout_ms spent waiting for the dead member's writes. Null: never raised.
  virtual std::shared_ptr<const std::atomic<bool>> abort_flag() const { return nullptr; }
  // This member's drain deadline (unix ms; 0: it does not drain). A rollout group's members
  // tell their leader in every command round, and the leader drains the whole group.
  virtual int64_t drain_by_unix_ms() const { return 0; }
  // This member's group work failed on its own (not through a round the group's break
  // failed): the coordinator ends the incarnation, so no member waits for it.
  virtual void report_failure(const std::string& cause) { (void)cause; }
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
  // The trainer group this node is a member of; null when the trainer is one process.
  virtual trainer_group* group() { return nullptr; }
};

// The job stats' lists that only grow (one entry per iteration or per policy version), as JSON
// pointers into the job stats: the reward curve, the iteration timings, and the weight plane's
// per-version records. They cross to the coordinator once each (actors/internal/job_history.h).
inline constexpr const char* kJobHistoryLists[] = {"/reward_curve", "/iterations",
                                                   "/weights/versions"};

// The job stats the views and the report follow, from every trainer node's (each a "job"
// object, in any order; null entries are skipped): the newest policy version's, ties to the
// later one, with each history list completed from the others. A recreated trainer (a new
// node) and a re-formed group's member 0 start their lists again at the checkpoint they
// resumed from, so without this the report's iterations covered the last incarnation only.
// An earlier incarnation gives the entries before the newer list's first (by "iteration", or
// "version" for the per-version records); entries both have are the newer's. Empty object when
// no trainer reported. `leader`, when given, gets the index in `jobs` of the one whose figures
// lead (unchanged when none).
nlohmann::json joined_trainer_job(const std::vector<const nlohmann::json*>& jobs,
                                  size_t* leader = nullptr);

// Per history list (a kJobHistoryLists pointer), the index of the first entry a stats() caller
// wants; a list not named starts at 0.
using history_cursor = std::map<std::string, size_t>;

// Puts at `pointer` in `stats` the entries of `list` from index from[pointer] on (all of them
// when that is past the end: a job restored from a checkpoint starts its lists again) and
// records the index it started at in stats["history_from"][pointer]. `dropped`: entries a job
// that caps the list took off its front, so list[0] is entry `dropped` (indices stay those of
// the whole list; entries dropped before they were sent are gone). Only that tail is copied:
// whole, the lists were copied after every policy version, a cost that grew with the run on
// the step's thread.
void put_history(nlohmann::json& stats, const char* pointer,
                 const std::vector<nlohmann::json>& list, const history_cursor& from,
                 size_t dropped = 0);

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
  // Groups the step still needs before it trains (0: any number; each batch is a step). The
  // trainer asks its shards for no more than this, split over them, so a step trains on an
  // iteration's groups and not on a batch's overshoot.
  virtual uint64_t num_groups_wanted() const { return 0; }
  // Job figures for progress and the report, as JSON; its history lists (kJobHistoryLists) hold
  // their entries from `from` on, through put_history.
  virtual nlohmann::json stats(const history_cursor& from) const = 0;
  // Forget the groups held back and not trained yet: the runtime starts a new consumer
  // incarnation (a restart of the ranks), so the shards serve those groups again.
  virtual void drop_held() {}
  // Called once the step is made and its version announced, before the first batch: a step
  // whose work is another process (trainer.worker) starts it here, so its start-up overlaps
  // the first rollouts rather than following the first batch.
  virtual void prepare() {}
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
  // What samples from outside the job's own generator (an external rollout worker,
  // python/WORKERS.md) must respect to be trainable: token ids below vocab_size(), at most
  // max_completion_tokens() generated tokens. 0: not checked. sampling(): the settings the
  // job's own generator samples with, passed to external workers with every lease.
  virtual uint32_t vocab_size() const { return 0; }
  virtual uint32_t max_completion_tokens() const { return 0; }
  virtual nlohmann::json sampling() const { return nlohmann::json::object(); }
  // Trainer rank 0's step (never null). `ranks` stays valid for the step's whole life; a
  // step that does all its work on rank 0 may ignore it.
  virtual result<std::unique_ptr<trainer_step>> make_trainer(trainer_ranks& ranks) = 0;
  // A trainer group member other than rank 0's: takes its part in every step rank 0's
  // process drives, until the group breaks or stops (the error says why). ranks.group() is
  // not null.
  virtual status serve_trainer_member(trainer_ranks& ranks) {
    (void)ranks;
    return error(errc::invalid_config,
                 "job " + name() + " cannot run a trainer group across nodes");
  }
  // A rollout EP group across nodes (rollout.group_size > 1, actors/RUNTIME.md): member 0's
  // rollout work, generating each prompt group on every member's ranks (the members' share of
  // each step follows the commands the work sends over group.allgather "members"), and the
  // other members' side, until the group breaks or its leader dissolves it (the error says
  // why; ok when the leader stopped the members). `group` outlives both.
  virtual result<std::unique_ptr<rollout_work>> make_group_rollout_work(trainer_group& group) {
    (void)group;
    return error(errc::invalid_config,
                 "job " + name() + " cannot run a rollout group across nodes");
  }
  virtual status serve_rollout_member(trainer_group& group) {
    (void)group;
    return error(errc::invalid_config,
                 "job " + name() + " cannot run a rollout group across nodes");
  }
  // The weight plane as this node sees it (weights/cache_directory.h): set by the runtime
  // once, before any work is made. A job that keeps no policy versions ignores it.
  virtual void use_weight_caches(std::shared_ptr<weights::cache_directory> caches) { (void)caches; }
  // The node's weight-plane figures for its stats (bytes_from, when it held each version);
  // null when it read none.
  virtual nlohmann::json weights_stats() const { return nullptr; }
  // Policy version v's bytes as this node's weight feed holds them (checked whole against
  // the version's content hash), for an external rollout worker's weights(v). A job that
  // keeps no policy versions has none.
  virtual result<std::shared_ptr<const std::string>> policy_version_bytes(uint64_t version) {
    return error(errc::not_found, "job " + name() + " keeps no policy versions (asked for " +
                                      std::to_string(version) + ")");
  }
  // An env node's environment for one episode of `task` (env/ENV.md). A job whose tasks
  // are single-turn has none.
  virtual result<std::unique_ptr<env::environment>> make_environment(const std::string& task) {
    return error(errc::invalid_argument,
                 "job " + name() + " has no environment for task '" + task + "'");
  }
};

// Builds the job a node runs, from its config and role.
using job_factory = std::function<result<std::shared_ptr<job>>(const config& cfg, node_role role)>;

}  // namespace moerl::actors
