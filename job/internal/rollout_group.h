// A rollout expert-parallel group spanning node processes (rollout.group_size > 1,
// actors/job.h make_group_rollout_work / serve_rollout_member): ONE model instance whose
// global ranks are spread over the members' processes, member k holding ranks k * R + [0, R)
// (R = job.rollout_ep_ranks) and only those ranks' experts. The fabric bootstrap of every
// rank runs over the group's "fabric" channel (job/group_bootstrap.h); every decode step's
// dispatch/combine then runs over libfabric between the processes (shm on one host, tcp
// between hosts or network namespaces: fabric.provider).
//
// Member 0 (the leader) holds the leases; for each prompt group it sends the command over
// the "members" channel (version, prompt, rows, sampling seed), every member loads that
// version through its own weight feed if it has not yet, generates its ranks' rows (the
// ranks meet in every decode step), and the followers' rows reach the leader over the
// group's dense collectives (fabric broadcasts; until 7 Dec a second round through the
// coordinator, ~13 KB of JSON a default iteration), which assembles the group as a
// single-process EP group would. Every command round and every follower's rows carry its
// drain deadline, so a Spot notice to any member reaches the leader, which drains the whole
// group (actors/rollout_role.cpp). A dead member fails the others' waits:
// the "members" rounds at once (the coordinator fails them), the fabric waits through the
// group's abort flag or at fabric.op_timeout_ms.
//
// Threading: one owner thread per member (the rollout worker / the member's serve loop).
#pragma once

#if !defined(MOERL_INSIDE_moerl_job)
#error "job/internal/rollout_group.h is private to moerl_job (job/): include its public headers"
#endif

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/job.h"
#include "common/config.h"
#include "common/error.h"
#include "policy/model.h"

namespace moerl::job {

struct rollout_group_setup {
  config cfg;
  policy::model_config model;
  int ranks_per_member = 1;  // job.rollout_ep_ranks
  int rows_per_group = 1;    // ledger.group_size
  // Prompt groups one generate may carry (a leased batch of units generated at once); sizes
  // the ranks' low-latency buffers: rows_per_group x this rows per command.
  int max_prompts_per_generate = 1;
  // The full parameter bytes of a policy version > 0 (the member's weight feed).
  std::function<result<std::shared_ptr<const std::string>>(uint64_t version)> read_version;
};

class rollout_group_leader {
 public:
  // Collective with every member's serve_rollout_group_member (the ranks' fabric set-up).
  static result<std::unique_ptr<rollout_group_leader>> create(const rollout_group_setup& s,
                                                              actors::trainer_group& group);
  // Stops the members and ends the incarnation (when the group still works), then leaves
  // the fabric group with them.
  ~rollout_group_leader();

  // rows_per_prompt rows from each of `prompts` (one length; at most
  // max_prompts_per_generate) at policy `version`, prompt-major, split over every member's
  // ranks (rows_of_rank), rank r sampling with rank_sampling_seed(seed, r); in row order.
  result<policy::generation> generate(const std::vector<std::vector<policy::token_id>>& prompts,
                                      int rows_per_prompt, int max_new, float temperature,
                                      uint64_t seed, uint64_t version);
  // A round with nothing to generate: hears the members' drain deadlines.
  status ping();
  // The earliest drain deadline any member told in the last round (unix ms; 0: none).
  int64_t drain_by_unix_ms() const { return drain_by_; }
  // A round or a step failed: the group is unusable (it re-forms).
  bool broken() const { return broken_; }

 private:
  struct state;
  explicit rollout_group_leader(std::unique_ptr<state> s);
  // One command round; the followers' answers (drain deadlines) are taken in.
  status command(const std::string& op);
  std::unique_ptr<state> s_;
  int64_t drain_by_ = 0;
  int drain_member_ = 0;  // the member that told drain_by_ (0: none)
  bool broken_ = false;
};

// A member other than the leader: takes its part in every command until the leader stops
// the members (ok) or the group breaks (the error).
status serve_rollout_group_member(const rollout_group_setup& s, actors::trainer_group& group);

}  // namespace moerl::job
