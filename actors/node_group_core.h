// Groups that span node processes (the trainer group today): which nodes are members, when a
// group forms, which rank each member holds, and the all-gather rendezvous that carries the
// fabric bootstrap (fabric/bootstrap.h) over the control plane. The coordinator owns one;
// like coordinator_core it has no CAF in it, so every decision is tested deterministically.
//
// Life of a group (RUNTIME.md, "Groups across nodes"):
//   forming  - members join (config trainer.group, trainer.group_size); a member whose model
//              shape, config hash or moerl version differs from the group's is refused with
//              the difference named, and the group keeps waiting. When group_size members
//              are in, the group forms: a new incarnation, members ordered by node name (a
//              StatefulSet's replacement keeps its name, so it keeps its rank), member k
//              holding global ranks [k * ranks_per_node, (k + 1) * ranks_per_node).
//   formed   - members run; their all-gathers (by channel, participants, call order) complete
//              when every participant contributed.
//   broken   - a member was lost (process gone, link lost past the grace, or a member reported
//              its group operation failed): every pending all-gather of the incarnation fails
//              (peer_dead naming the member), every other member is told to stop, and all of
//              them (survivors and the replacement) join again for the next incarnation. The
//              re-formation is recorded (cause, downtime).
// A group that stays forming past form_timeout_ms reports which members are missing (by
// name when it formed before, else by count), and keeps waiting.
//
// Threading: not thread-safe; owned by the coordinator actor.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace moerl::actors {

// What must agree across a group's members.
struct group_fingerprint {
  std::string model_shape;  // the policy's dimensions
  std::string config_hash;  // the job / policy / trainer configuration
  std::string version;      // moerl's version
  // "" when they agree, else a sentence naming each difference (mine vs the group's).
  std::string difference(const group_fingerprint& group) const;
};

struct group_join_request {
  std::string group;  // trainer.group
  std::string node_id, node_name;
  std::string role;             // the members' role (trainer)
  uint32_t group_size = 0;      // members (trainer.group_size)
  uint32_t ranks_per_node = 1;  // global ranks each member holds
  group_fingerprint fingerprint;
};

// What a member learns once its group formed.
struct group_view {
  std::string group;
  uint64_t incarnation = 0;  // 1 for the first formation, +1 per re-formation
  uint32_t member_index = 0;
  uint32_t group_size = 0;
  uint32_t ranks_per_node = 1;
  std::vector<std::string> members;  // node names by member index
};

// One completed or failed all-gather call, for the actor to answer.
struct gather_completion {
  uint64_t request = 0;  // the id the actor gave the call
  result<std::vector<std::string>> contributions = std::vector<std::string>{};
};

class node_group_core {
 public:
  explicit node_group_core(int64_t form_timeout_ms) : form_timeout_ms_(form_timeout_ms) {}

  // A member (re-)joins. Ok: it is in the forming set (the group may have formed now: see
  // view()). Refused (the group keeps waiting for a good member): a different fingerprint,
  // group size or role than the group's, or a node name already held by another live member.
  status join(const group_join_request& req, int64_t now_ms);
  // The member's view of its formed group; nullopt while its group is forming (or it is in
  // none). Members poll it after join().
  std::optional<group_view> view(const std::string& node_id) const;
  // The node is gone or its group operation failed: breaks the group it is a member of (a
  // no-op for other nodes). `cause` is recorded in the re-formation entry. Returns the node
  // ids of the other members, which must stop their group work.
  // `orderly`: the run is ending; the group stops (no re-formation is recorded).
  // A member of a formation that a survivor's report already broke (member_failed: its
  // write to the dead peer failed first) becomes the re-formation's cause.
  std::vector<std::string> member_lost(const std::string& node_id, const std::string& cause,
                                       int64_t now_ms, bool orderly = false);
  // A member reports that its incarnation's group work failed (a peer timed out mid-step):
  // the same as member_lost for that incarnation; stale reports (an older incarnation) are
  // ignored.
  std::vector<std::string> member_failed(const std::string& node_id, uint64_t incarnation,
                                         const std::string& cause, int64_t now_ms);

  // All-gather among `participants` (sorted, unique, containing `self`) of the member's
  // current incarnation on `channel` ("members": participants are member indices;
  // "fabric": global ranks). Returns the completions this call caused: none while the round
  // waits for others, every participant's when it completed, or this call's own failure
  // (stale incarnation, not a member, a participant out of range).
  std::vector<gather_completion> allgather(uint64_t request, const std::string& node_id,
                                           uint64_t incarnation, const std::string& channel,
                                           const std::vector<int>& participants, int self,
                                           std::string payload);
  // The calls whose waits ended because their groups broke since the last call.
  std::vector<gather_completion> take_failed_gathers();

  // Periodic: forming groups past the timeout log which members are missing (returned as
  // lines for the coordinator's log, each group at most once per timeout period).
  std::vector<std::string> tick(int64_t now_ms);

  // The node's group and global ranks for `console nodes` (null when in no group).
  nlohmann::json node_json(const std::string& node_id) const;
  // The report's `groups`: [{name, role, members, state, incarnation, reformed: [...]}].
  nlohmann::json groups_json() const;
  // The re-formed group's rank 0 restored its state at `version` (the report's
  // restored_version of the latest re-formation).
  void restored(const std::string& node_id, uint64_t incarnation, uint64_t version);
  // Tests and the report: re-formations of a group so far.
  size_t num_reformed(const std::string& group) const;

  // ---- history that outlives the coordinator (RUNTIME.md, "Groups across nodes") --------
  // Each group's incarnation and re-formations, as the coordinator saves them to the store:
  // {"format": 1, "groups": {name: {"incarnation": N, "reformed": [{broken_ms, formed_ms,
  // cause, restored_version}]}}}. Times are the coordinator's monotonic clock (one host's).
  nlohmann::json history_json() const;
  // Bumped by every change history_json() shows (a formation, a break, a restored version).
  uint64_t history_version() const { return history_version_; }
  // A restarted coordinator continues its predecessor's groups: a group's first formation
  // under it takes the incarnation after the saved one (a member's report from an earlier
  // incarnation stays stale) and keeps the re-formations listed before; that formation is a
  // re-formation caused by the coordinator's restart, timed from `now_ms`, unless the group
  // was already re-forming after a member's loss (that re-formation goes on). An error names
  // what is malformed; nothing is restored then.
  status restore_history(const nlohmann::json& history, int64_t now_ms);

 private:
  struct round {
    std::vector<int> participants;
    std::map<int, std::pair<uint64_t, std::string>> got;  // participant -> (request, payload)
  };
  struct reformation {
    int64_t broken_ms = 0;
    int64_t formed_ms = -1;  // -1: not re-formed yet
    std::string cause;
    int64_t restored_version = -1;  // -1: not reported yet
    // The break came from a survivor's report (a peer's write failed), a symptom: a member
    // of the broken formation that is then found dead is named as the cause.
    bool reported_by_survivor = false;
  };
  struct group_state {
    std::string name, role;
    uint32_t group_size = 0, ranks_per_node = 1;
    group_fingerprint fingerprint;
    std::string state = "forming";  // forming | formed | stopped (the run ended)
    uint64_t incarnation = 0;
    std::vector<std::string> members;            // node ids by member index (formed)
    std::map<std::string, std::string> joining;  // node id -> name (forming)
    std::map<std::string, std::string> names;    // every node id seen -> name
    std::set<std::string> last_member_names;     // the previous formation's names
    std::set<std::string> broken_members;        // node ids of the formation that broke last
    int64_t forming_since_ms = 0;
    int64_t last_missing_log_ms = 0;
    std::map<std::string, round> rounds;    // key: channel + participants + call number
    std::map<std::string, uint64_t> calls;  // per (node, channel, participants): calls made
    std::vector<reformation> reformed;
  };
  group_state* group_of(const std::string& node_id);
  const group_state* group_of(const std::string& node_id) const;
  void form(group_state& g, int64_t now_ms);
  std::vector<std::string> dissolve(group_state& g, const std::string& lost,
                                    const std::string& cause, int64_t now_ms, bool orderly);
  void name_dead_member_as_cause(const std::string& node_id, const std::string& cause);

  // A group the saved history names and no member has joined yet under this coordinator.
  struct saved_group {
    uint64_t incarnation = 0;
    std::vector<reformation> reformed;
  };

  int64_t form_timeout_ms_;
  std::map<std::string, group_state> groups_;
  std::map<std::string, saved_group> saved_;  // consumed by the group's first join
  uint64_t history_version_ = 0;
  std::map<std::string, std::string> member_group_;  // node id -> group name
  std::vector<gather_completion> failed_;
};

}  // namespace moerl::actors
