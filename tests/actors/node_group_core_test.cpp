// Groups across nodes, decided without CAF: formation, ranks, refusals that name the
// difference, the all-gather rendezvous, a member's loss breaking the group and its
// re-formation with a replacement, and the missing-members report.
#include <gtest/gtest.h>

#include "actors/node_group_core.h"

using namespace moerl::actors;

namespace {

group_join_request member(const std::string& id, const std::string& name) {
  group_join_request r;
  r.group = "trainer";
  r.node_id = id;
  r.node_name = name;
  r.role = "trainer";
  r.group_size = 2;
  r.ranks_per_node = 2;
  r.fingerprint = {"d64-l2-e4", "abc", "0.1.0"};
  return r;
}

}  // namespace

TEST(node_group_core, forms_when_every_member_joined_and_orders_ranks_by_name) {
  node_group_core c(1000);
  ASSERT_TRUE(c.join(member("id-b", "trainer-1"), 0));
  EXPECT_FALSE(c.view("id-b"));  // one of two: still forming
  ASSERT_TRUE(c.join(member("id-a", "trainer-0"), 10));
  auto a = c.view("id-a"), b = c.view("id-b");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->member_index, 0u);
  EXPECT_EQ(b->member_index, 1u);
  EXPECT_EQ(a->incarnation, 1u);
  EXPECT_EQ(a->members, (std::vector<std::string>{"trainer-0", "trainer-1"}));
  EXPECT_EQ(c.node_json("id-b")["ranks"], (nlohmann::json{2, 3}));
  EXPECT_TRUE(c.join(member("id-a", "trainer-0"), 20));  // a repeated join changes nothing
  EXPECT_EQ(c.view("id-a")->incarnation, 1u);
}

TEST(node_group_core, refuses_a_different_member_naming_the_difference_and_keeps_waiting) {
  node_group_core c(1000);
  ASSERT_TRUE(c.join(member("id-a", "trainer-0"), 0));
  auto bad = member("id-x", "trainer-1");
  bad.fingerprint.model_shape = "d128-l2-e4";
  bad.fingerprint.version = "0.2.0";
  auto st = c.join(bad, 5);
  ASSERT_FALSE(st);
  EXPECT_NE(st.err().message.find("model shape d128-l2-e4 differs from the group's d64-l2-e4"),
            std::string::npos);
  EXPECT_NE(st.err().message.find("moerl version 0.2.0"), std::string::npos);
  auto hash = member("id-y", "trainer-1");
  hash.fingerprint.config_hash = "zzz";
  EXPECT_NE(c.join(hash, 6).err().message.find("config hash"), std::string::npos);
  auto size = member("id-z", "trainer-1");
  size.group_size = 3;
  EXPECT_NE(c.join(size, 7).err().message.find("size 3 x 2"), std::string::npos);
  EXPECT_FALSE(c.view("id-a"));  // still waiting for a good member
  ASSERT_TRUE(c.join(member("id-b", "trainer-1"), 8));
  EXPECT_TRUE(c.view("id-a"));
}

TEST(node_group_core, never_gives_one_rank_to_two_members) {
  node_group_core c(1000);
  ASSERT_TRUE(c.join(member("id-a", "trainer-0"), 0));
  EXPECT_FALSE(c.join(member("id-a2", "trainer-0"), 1));  // the same name joining twice
  ASSERT_TRUE(c.join(member("id-b", "trainer-1"), 2));
  // Formed: a third node (a replacement that came before the loss was seen) is refused.
  EXPECT_FALSE(c.join(member("id-c", "trainer-1"), 3));
  EXPECT_EQ(c.view("id-b")->member_index, 1u);
}

TEST(node_group_core, allgather_completes_when_every_participant_contributed) {
  node_group_core c(1000);
  ASSERT_TRUE(c.join(member("id-a", "trainer-0"), 0));
  ASSERT_TRUE(c.join(member("id-b", "trainer-1"), 0));
  const std::vector<int> all{0, 1, 2, 3};
  EXPECT_TRUE(c.allgather(1, "id-a", 1, "fabric", all, 0, "r0").empty());
  EXPECT_TRUE(c.allgather(2, "id-a", 1, "fabric", all, 1, "r1").empty());
  EXPECT_TRUE(c.allgather(3, "id-b", 1, "fabric", all, 3, "r3").empty());
  auto done = c.allgather(4, "id-b", 1, "fabric", all, 2, "r2");
  ASSERT_EQ(done.size(), 4u);
  for (auto& d : done) {
    ASSERT_TRUE(d.contributions);
    EXPECT_EQ(*d.contributions, (std::vector<std::string>{"r0", "r1", "r2", "r3"}));
  }
  // A node may speak only for its own ranks, and only in its incarnation.
  auto wrong = c.allgather(5, "id-a", 1, "fabric", all, 2, "x");
  ASSERT_EQ(wrong.size(), 1u);
  EXPECT_FALSE(wrong[0].contributions);
  auto stale = c.allgather(6, "id-a", 7, "members", {0, 1}, 0, "x");
  ASSERT_EQ(stale.size(), 1u);
  EXPECT_EQ(stale[0].contributions.err().code, moerl::errc::peer_dead);
}

TEST(node_group_core, a_lost_member_breaks_the_group_which_reforms_with_its_replacement) {
  node_group_core c(1000);
  ASSERT_TRUE(c.join(member("id-a", "trainer-0"), 0));
  ASSERT_TRUE(c.join(member("id-b", "trainer-1"), 0));
  EXPECT_TRUE(c.allgather(1, "id-a", 1, "members", {0, 1}, 0, "cmd").empty());
  auto others = c.member_lost("id-b", "SIGKILL", 1000);
  EXPECT_EQ(others, (std::vector<std::string>{"id-a"}));
  auto failed = c.take_failed_gathers();
  ASSERT_EQ(failed.size(), 1u);  // rank 0's waiting call fails, naming the member
  EXPECT_EQ(failed[0].request, 1u);
  EXPECT_NE(failed[0].contributions.err().message.find("trainer-1 SIGKILL"), std::string::npos);
  EXPECT_FALSE(c.view("id-a"));
  EXPECT_TRUE(c.member_lost("id-b", "again", 1001).empty());  // no longer a member
  // The survivor and the replacement (same name, new id) join; the replacement keeps rank 1.
  ASSERT_TRUE(c.join(member("id-a", "trainer-0"), 1500));
  auto lines = c.tick(2600);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("missing trainer-1"), std::string::npos);
  ASSERT_TRUE(c.join(member("id-b2", "trainer-1"), 3000));
  auto v = c.view("id-b2");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->member_index, 1u);
  EXPECT_EQ(v->incarnation, 2u);
  c.restored("id-a", 2, 7);
  auto g = c.groups_json()[0];
  EXPECT_EQ(g["state"], "formed");
  ASSERT_EQ(g["reformed"].size(), 1u);
  EXPECT_EQ(g["reformed"][0]["restored_version"], 7);
  EXPECT_DOUBLE_EQ(g["reformed"][0]["downtime_s"].get<double>(), 2.0);
  EXPECT_EQ(c.num_reformed("trainer"), 1u);
}

TEST(node_group_core, a_failed_group_operation_breaks_only_its_own_incarnation) {
  node_group_core c(1000);
  ASSERT_TRUE(c.join(member("id-a", "trainer-0"), 0));
  ASSERT_TRUE(c.join(member("id-b", "trainer-1"), 0));
  EXPECT_TRUE(c.member_failed("id-a", 5, "stale", 10).empty());  // an old incarnation's
  EXPECT_TRUE(c.view("id-a"));
  EXPECT_EQ(c.member_failed("id-a", 1, "all-reduce timed out", 20),
            (std::vector<std::string>{"id-b"}));
  EXPECT_FALSE(c.view("id-b"));
}

TEST(node_group_core, a_member_found_dead_after_a_survivor_reported_the_break_is_the_cause) {
  node_group_core c(1000);
  ASSERT_TRUE(c.join(member("id-a", "trainer-0"), 0));
  ASSERT_TRUE(c.join(member("id-b", "trainer-1"), 0));
  // trainer-0's write to the killed trainer-1 fails before the coordinator sees the death.
  EXPECT_EQ(c.member_failed("id-a", 1, "all-reduce write failed", 20),
            (std::vector<std::string>{"id-b"}));
  EXPECT_TRUE(c.member_lost("id-b", "killed by SIGKILL", 30).empty());
  auto r = c.groups_json()[0]["reformed"];
  ASSERT_EQ(r.size(), 1u);
  const auto cause = r[0]["cause"].get<std::string>();
  EXPECT_EQ(cause.find("trainer-1 killed by SIGKILL"), 0u) << cause;
  EXPECT_NE(cause.find("all-reduce write failed"), std::string::npos) << cause;
  // A second death (another node, or after the group re-formed) changes nothing.
  EXPECT_TRUE(c.member_lost("id-a", "later", 40).empty());
  EXPECT_EQ(c.groups_json()[0]["reformed"][0]["cause"], cause);
}

// A rollout EP group beside the trainer group (rollout.group_size): a Deployment's
// replacement joins under a new name and takes the lost member's place, and neither the
// loss nor the re-formation touches the trainer group.
TEST(node_group_core, a_rollout_group_reforms_with_a_renamed_replacement_apart_from_the_trainers) {
  node_group_core c(1000);
  auto rollout = [](const std::string& id, const std::string& name) {
    group_join_request r = member(id, name);
    r.group = "rollout-g0";
    r.role = "rollout";
    r.ranks_per_node = 1;
    return r;
  };
  ASSERT_TRUE(c.join(member("t0", "trainer-0"), 0));
  ASSERT_TRUE(c.join(member("t1", "trainer-1"), 0));
  ASSERT_TRUE(c.join(rollout("r0", "rollout-0"), 0));
  ASSERT_TRUE(c.join(rollout("r1", "rollout-1"), 0));
  ASSERT_TRUE(c.view("r1") && c.view("t1"));
  EXPECT_EQ(c.node_json("r1")["group"], "rollout-g0");
  EXPECT_EQ(c.node_json("r1")["ranks"], (nlohmann::json{1}));
  // A rollout node cannot join the trainer group (its role differs).
  group_join_request wrong = rollout("r8", "rollout-8");
  wrong.group = "trainer";
  EXPECT_FALSE(c.join(wrong, 0));
  // The leader waits in a members round; the follower dies.
  EXPECT_TRUE(c.allgather(1, "r0", 1, "members", {0, 1}, 0, "generate").empty());
  EXPECT_EQ(c.member_lost("r1", "SIGKILL", 100), (std::vector<std::string>{"r0"}));
  ASSERT_EQ(c.take_failed_gathers().size(), 1u);
  EXPECT_TRUE(c.view("t0") && c.view("t0")->incarnation == 1u);  // the trainers go on
  // The survivor and the replacement under its new name form incarnation 2.
  ASSERT_TRUE(c.join(rollout("r0", "rollout-0"), 200));
  ASSERT_TRUE(c.join(rollout("r1b", "rollout-1-r1"), 300));
  auto v = c.view("r1b");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->incarnation, 2u);
  EXPECT_EQ(v->members, (std::vector<std::string>{"rollout-0", "rollout-1-r1"}));
  EXPECT_EQ(c.num_reformed("rollout-g0"), 1u);
  EXPECT_EQ(c.num_reformed("trainer"), 0u);
}

// A coordinator restarted from its journal continues its predecessor's groups: the saved
// history (what the coordinator writes to the store) restores incarnations and re-formations.
TEST(node_group_core, a_restarted_coordinator_continues_the_groups_history) {
  node_group_core before(1000);
  ASSERT_TRUE(before.join(member("id-a", "trainer-0"), 0));
  ASSERT_TRUE(before.join(member("id-b", "trainer-1"), 0));
  const uint64_t v0 = before.history_version();
  before.member_lost("id-b", "killed by SIGKILL", 100);
  ASSERT_TRUE(before.join(member("id-a", "trainer-0"), 150));
  ASSERT_TRUE(before.join(member("id-c", "trainer-1"), 400));
  before.restored("id-a", 2, 7);
  EXPECT_GT(before.history_version(), v0);  // a break, a formation and a restore were changes
  const nlohmann::json saved = before.history_json();
  EXPECT_EQ(saved["groups"]["trainer"]["incarnation"], 2);

  node_group_core after(1000);
  ASSERT_TRUE(after.restore_history(nlohmann::json::parse(saved.dump()), 5000));
  // Saved before any member joined again: the history shows the group as it was.
  EXPECT_EQ(after.history_json()["groups"]["trainer"]["incarnation"], 2);
  ASSERT_TRUE(after.join(member("id-d", "trainer-0"), 5100));
  ASSERT_TRUE(after.join(member("id-e", "trainer-1"), 5300));
  // Incarnation 3, not 1: a report or an all-gather of incarnation 1 or 2 stays stale.
  EXPECT_EQ(after.view("id-d")->incarnation, 3u);
  EXPECT_TRUE(after.member_failed("id-d", 2, "old incarnation", 5400).empty());
  const auto g = after.groups_json()[0];
  ASSERT_EQ(g["reformed"].size(), 2u) << g.dump();
  EXPECT_EQ(g["reformed"][0]["cause"], "trainer-1 killed by SIGKILL");
  EXPECT_DOUBLE_EQ(g["reformed"][0]["downtime_s"].get<double>(), 0.3);
  EXPECT_EQ(g["reformed"][0]["restored_version"], 7);
  EXPECT_NE(g["reformed"][1]["cause"].get<std::string>().find("coordinator restarted"),
            std::string::npos);
  EXPECT_DOUBLE_EQ(g["reformed"][1]["downtime_s"].get<double>(), 0.3);  // 5000 -> 5300
}

TEST(node_group_core, a_restart_during_a_reformation_continues_that_reformation) {
  node_group_core before(1000);
  ASSERT_TRUE(before.join(member("id-a", "trainer-0"), 0));
  ASSERT_TRUE(before.join(member("id-b", "trainer-1"), 0));
  before.member_lost("id-b", "killed by SIGKILL", 100);  // the coordinator dies re-forming
  node_group_core after(1000);
  ASSERT_TRUE(after.restore_history(before.history_json(), 2000));
  ASSERT_TRUE(after.join(member("id-a2", "trainer-0"), 2100));
  ASSERT_TRUE(after.join(member("id-b2", "trainer-1"), 2500));
  const auto g = after.groups_json()[0];
  ASSERT_EQ(g["reformed"].size(), 1u) << g.dump();  // one loss, one re-formation
  EXPECT_EQ(g["reformed"][0]["cause"], "trainer-1 killed by SIGKILL");
  EXPECT_DOUBLE_EQ(g["reformed"][0]["downtime_s"].get<double>(), 2.4);  // 100 -> 2500
  EXPECT_EQ(after.view("id-a2")->incarnation, 2u);
}

TEST(node_group_core, a_malformed_history_is_refused_naming_the_problem) {
  node_group_core c(1000);
  EXPECT_NE(c.restore_history(nlohmann::json::array(), 0).err().message.find("format-1"),
            std::string::npos);
  auto bad = nlohmann::json::parse(
      R"({"format":1,"groups":{"trainer":{"incarnation":-1,"reformed":[]}}})");
  EXPECT_NE(c.restore_history(bad, 0).err().message.find("group trainer"), std::string::npos);
  bad = nlohmann::json::parse(
      R"({"format":1,"groups":{"trainer":{"incarnation":2,"reformed":[{"cause":3}]}}})");
  EXPECT_NE(c.restore_history(bad, 0).err().message.find("re-formation"), std::string::npos);
  // Nothing was restored: the group starts at incarnation 1.
  ASSERT_TRUE(c.join(member("id-a", "trainer-0"), 0));
  ASSERT_TRUE(c.join(member("id-b", "trainer-1"), 0));
  EXPECT_EQ(c.view("id-a")->incarnation, 1u);
  EXPECT_TRUE(c.groups_json()[0]["reformed"].empty());
}
