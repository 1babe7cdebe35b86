// A node's side of a group that spans node processes (node_group_core.h is the coordinator's):
// joining the node's trainer group and waiting for it to form, and the member's link, which
// carries the group's all-gathers (the fabric bootstrap, the members' step commands) to the
// coordinator. Each call is its own scoped actor, so rank threads (not actors) call it too.
#pragma once

#ifndef MOERL_INSIDE_moerl_actors
#error \
    "actors/internal/node_group_member.h is private to moerl_actors (actors/): include its public headers"
#endif

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <caf/fwd.hpp>

#include "actors/internal/node_context.h"
#include "actors/job.h"
#include "actors/node_group_core.h"

namespace moerl::actors {

// What the members of a trainer group must agree on, from the node's config: the policy's
// dimensions, a hash of the policy / job / grpo / trainer keys, and moerl's version.
group_fingerprint trainer_group_fingerprint(const config& cfg);
// The same for a rollout group: the policy / job / grpo / rollout keys.
group_fingerprint rollout_group_fingerprint(const config& cfg);

// Which group a node joins: its name, size, ranks per member and what members must share.
struct group_membership {
  std::string group;  // trainer.group / rollout.group
  uint32_t group_size = 1;
  uint32_t ranks_per_node = 1;
  group_fingerprint fingerprint;
};
group_membership trainer_membership(const config& cfg);  // x job.trainer_ep_ranks
group_membership rollout_membership(const config& cfg);  // x job.rollout_ep_ranks

// Joins the node's group (`m`, of the node's role) and waits until it formed. A refusal (a
// differing member, a formed group still running) is logged and retried every 500 ms: the
// group keeps waiting for a good member, and a replacement waits for the group to break.
// nullopt when the loop must end (stop, drain).
std::optional<group_view> join_node_group(caf::blocking_actor* self, node_context& ctx,
                                          const group_membership& m);
// join_node_group with trainer_membership.
std::optional<group_view> join_trainer_group(caf::blocking_actor* self, node_context& ctx);

// A member's link to its formed group (one incarnation). A watcher thread asks the
// coordinator for the member's view every 100 ms and raises abort_flag() once the group has
// moved past this incarnation, so a step sitting in a fabric wait for a dead member's writes
// fails at once (actors/RUNTIME.md, "Groups across nodes"). An all-gather of a draining node
// ends (shutting_down) once its drain deadline passed: the node must go, group or not.
class group_member_link final : public trainer_group {
 public:
  group_member_link(caf::actor_system& sys, std::shared_ptr<node_context> ctx, group_view v);
  ~group_member_link() override;

  uint32_t member_index() const override { return view_.member_index; }
  uint32_t num_members() const override { return view_.group_size; }
  uint32_t ranks_per_member() const override { return view_.ranks_per_node; }
  uint64_t incarnation() const override { return view_.incarnation; }
  result<std::vector<std::string>> allgather(const std::string& channel,
                                             const std::vector<int>& participants, int self,
                                             const std::string& mine, int64_t timeout_ms) override;

  // This node's drain deadline (unix ms; 0 while it does not drain): a rollout group's
  // members tell their leader, which drains the whole group by the earliest.
  int64_t drain_by_unix_ms() const override;

  const group_view& view() const { return view_; }
  std::shared_ptr<const std::atomic<bool>> abort_flag() const override { return broken_; }
  // False once the coordinator's group has moved past this incarnation (a member was lost),
  // as the watcher last saw it; true also while the coordinator does not answer (its loss is
  // the node agent's business).
  bool still_current() const { return !broken_->load(std::memory_order_acquire); }
  // This member's group work failed (e.g. a peer timed out mid-step): the coordinator breaks
  // the incarnation, so every member stops and the group re-forms.
  void report_failure(const std::string& cause) override;
  // Rank 0 restored the re-formed group's state at `version` (the report's restored_version).
  void report_restored(uint64_t version);

 private:
  void watch();  // the watcher thread's loop

  caf::actor_system& sys_;
  std::shared_ptr<node_context> ctx_;
  group_view view_;
  std::shared_ptr<std::atomic<bool>> broken_ = std::make_shared<std::atomic<bool>>(false);
  std::mutex mu_;
  std::condition_variable wake_;
  bool leaving_ = false;  // under mu_: the destructor ends the watcher
  std::thread watcher_;   // last: starts once everything it reads is built
};

}  // namespace moerl::actors
