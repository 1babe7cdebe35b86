#include "actors/group_rounds.h"

#include <nlohmann/json.hpp>

namespace moerl::actors {
namespace {

// A member waits for member 0's stop as long as member 0's work runs; the group's breaking
// ends the wait at once (the coordinator fails the round).
constexpr int64_t kStopWaitMs = 3600 * 1000;

}  // namespace

result<std::vector<std::string>> all_members_allgather(trainer_group& group,
                                                       const std::string& mine,
                                                       int64_t timeout_ms) {
  std::vector<int> members;
  for (uint32_t m = 0; m < group.num_members(); ++m) members.push_back(static_cast<int>(m));
  return group.allgather("members", members, static_cast<int>(group.member_index()), mine,
                         timeout_ms);
}

member_stop_round::member_stop_round(trainer_group& group)
    : waiter_([this, &group] {
        auto r = all_members_allgather(group, "{}", kStopWaitMs);
        if (r && !r->empty() &&
            nlohmann::json::parse((*r)[0], nullptr, false).value("op", "") == std::string("stop")) {
          state_ = 1;
          return;
        }
        why_ = r ? "member 0's round after the rendezvous is not a stop"
                 : "the group's round failed: " + r.err().to_string();
        state_ = 2;
      }) {}

member_stop_round::~member_stop_round() { waiter_.join(); }

status member_stop_round::outcome(const std::string& what) const {
  if (state_.load() == 2) return error(errc::peer_dead, what + ": " + why_);
  return ok_status();
}

}  // namespace moerl::actors
