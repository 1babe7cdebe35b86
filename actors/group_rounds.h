// Rounds among every member of a group across nodes (actors/job.h trainer_group) on its
// "members" channel, as the group's work uses them: one all-gather of every member, and
// member k > 0's wait for member 0's "stop" round, which ends an incarnation's work in the
// groups of external workers (python/WORKERS.md: a Python trainer group, a Python rollout
// group), whose members between the rendezvous and the stop only serve their own worker.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "actors/job.h"
#include "common/error.h"

namespace moerl::actors {

// A round among every member of `group`: each member's `mine`, in member order. Fails
// (peer_dead) when the group broke.
result<std::vector<std::string>> all_members_allgather(trainer_group& group,
                                                       const std::string& mine, int64_t timeout_ms);

// Waits, on a thread of its own, for member 0's next round, which must be {"op": "stop"},
// while the member's thread serves its worker. The round ends with member 0's stop or when the
// group breaks: a member that fails on its own calls group.report_failure before this is
// destroyed (the destructor joins the thread).
class member_stop_round {
 public:
  explicit member_stop_round(trainer_group& group);
  ~member_stop_round();
  member_stop_round(const member_stop_round&) = delete;
  member_stop_round& operator=(const member_stop_round&) = delete;

  // The round ended: member 0 stopped the members, or the group broke.
  bool ended() const { return state_.load() != 0; }
  // Once ended(): ok for member 0's stop, else peer_dead naming why (`what` names the group).
  status outcome(const std::string& what) const;

 private:
  std::atomic<int> state_{0};  // 0: pending, 1: stop, 2: failed
  std::string why_;            // written before state_ becomes 2
  std::thread waiter_;
};

}  // namespace moerl::actors
