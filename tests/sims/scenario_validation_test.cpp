// A bad scenario file is refused with the file, the line and the field named; a good one
// loads with its defaults. Each case feeds text to parse_scenario and reads the message.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "sims/scenario.h"
#include "sims/timeline.h"

namespace moerl::sims {
namespace {

std::string refusal(const std::string& text) {
  auto r = parse_scenario(text, "bad.yaml");
  if (r.ok()) return "(accepted)";
  EXPECT_EQ(r.err().code, errc::invalid_config);
  return r.err().message;
}

const char* kMinimal = R"(name: tiny
duration_s: 60
faults:
  - kind: hard_kill
    at_s: 5
)";

TEST(scenario_validation, minimal_scenario_loads_with_documented_defaults) {
  auto r = parse_scenario(kMinimal, "tiny.yaml");
  ASSERT_TRUE(r.ok()) << r.err().to_string();
  const scenario& s = *r;
  EXPECT_EQ(s.name, "tiny");
  EXPECT_EQ(s.seed, 1u);
  EXPECT_DOUBLE_EQ(s.duration_s, 60.0);
  EXPECT_DOUBLE_EQ(s.settle_s, 20.0);
  EXPECT_EQ(s.cluster.rollout, 2);
  EXPECT_TRUE(s.replacement.enabled);
  ASSERT_EQ(s.faults.size(), 1u);
  EXPECT_EQ(s.faults[0].kind, fault_kind::hard_kill);
  EXPECT_EQ(s.faults[0].target.role, "rollout");  // the kind's default role
  EXPECT_EQ(s.faults[0].target.count, 1);
  EXPECT_EQ(s.faults[0].line, 4);
}

TEST(scenario_validation, misspelt_parameter_is_refused_with_its_line) {
  const std::string msg = refusal(R"(name: x
duration_s: 60
faults:
  - kind: spot_notice
    at_s: 5
    dedline_s: 30
)");
  EXPECT_NE(msg.find("bad.yaml:6: faults[0].dedline_s: unknown field"), std::string::npos) << msg;
}

TEST(scenario_validation, parameter_of_another_kind_is_refused) {
  const std::string msg = refusal(R"(name: x
duration_s: 60
faults:
  - kind: hard_kill
    grace_s: 30
)");
  EXPECT_NE(msg.find("bad.yaml:5: faults[0].grace_s: unknown field"), std::string::npos) << msg;
}

TEST(scenario_validation, unknown_kind_lists_the_known_ones) {
  const std::string msg = refusal(R"(name: x
duration_s: 60
faults:
  - kind: meteor
)");
  EXPECT_NE(msg.find("bad.yaml:4: faults[0].kind: unknown fault kind 'meteor'"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("coordinator_restart"), std::string::npos) << msg;
}

TEST(scenario_validation, wrong_types_and_ranges_name_the_field) {
  EXPECT_NE(refusal("name: x\nduration_s: soon\nfaults: [{kind: hard_kill}]\n")
                .find("bad.yaml:2: duration_s: expected a finite number, got 'soon'"),
            std::string::npos);
  EXPECT_NE(
      refusal("name: x\nduration_s: 10\ncluster:\n  rollout: 0\nfaults: [{kind: hard_kill}]\n")
          .find("bad.yaml:4: cluster.rollout: must be in [1, 1024], got 0"),
      std::string::npos);
  EXPECT_NE(refusal("name: x\nduration_s: 10\nfaults:\n  - kind: partition\n")
                .find("bad.yaml:4: faults[0].duration_s: is required"),
            std::string::npos);
  EXPECT_NE(refusal("name: x\nduration_s: 10\nfaults:\n  - kind: hard_kill\n    fraction: 1.5\n")
                .find("bad.yaml:5: faults[0].fraction: must be in [0, 1], got 1.5"),
            std::string::npos);
  EXPECT_NE(
      refusal(
          "name: x\nduration_s: 10\nreplacement:\n  enabled: maybe\nfaults: [{kind: hard_kill}]\n")
          .find("bad.yaml:4: replacement.enabled: expected true or false"),
      std::string::npos);
}

TEST(scenario_validation, cluster_overrides_must_be_known_keys_of_the_right_type) {
  std::string msg = refusal(
      "name: x\nduration_s: 9\ncluster:\n  set: [ledger.lease_timout_ms=3000]\nfaults: [{kind: "
      "hard_kill}]\n");
  EXPECT_NE(msg.find("bad.yaml:4: cluster.set: entry 0:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ledger.lease_timout_ms"), std::string::npos) << msg;
  msg = refusal(
      "name: x\nduration_s: 9\ncluster:\n  set: [ledger.lease_timeout_ms=soon]\nfaults: [{kind: "
      "hard_kill}]\n");
  EXPECT_NE(msg.find("cluster.set: entry 0:"), std::string::npos) << msg;
  msg =
      refusal("name: x\nduration_s: 9\ncluster:\n  set: [novalue]\nfaults: [{kind: hard_kill}]\n");
  EXPECT_NE(msg.find("entry 0 'novalue' is not key=value"), std::string::npos) << msg;
}

TEST(scenario_validation, target_forms_are_exclusive) {
  const std::string msg = refusal(R"(name: x
duration_s: 60
faults:
  - kind: hard_kill
    count: 2
    rate_per_node_hour: 10
)");
  EXPECT_NE(msg.find("give only one of node, count, fraction, rate_per_node_hour"),
            std::string::npos)
      << msg;
  EXPECT_NE(refusal("name: x\nduration_s: 60\nfaults:\n  - kind: hard_kill\n    node: rollout-1\n  "
                    "  role: rollout\n")
                .find("bad.yaml:6: faults[0].role: a named node already has a role"),
            std::string::npos);
  EXPECT_NE(refusal("name: x\nduration_s: 60\nfaults:\n  - kind: hard_kill\n    role: gpu\n")
                .find("bad.yaml:5: faults[0].role: unknown role 'gpu'"),
            std::string::npos);
}

TEST(scenario_validation, fault_times_must_fall_inside_the_run) {
  EXPECT_NE(refusal("name: x\nduration_s: 60\nfaults:\n  - kind: hard_kill\n    at_s: 60\n")
                .find("faults[0].at_s: is not before duration_s"),
            std::string::npos);
  EXPECT_NE(refusal("name: x\nduration_s: 60\nfaults:\n  - kind: hard_kill\n    "
                    "rate_per_node_hour: 5\n    window_s: [10, 90]\n")
                .find("faults[0].window_s: ends after duration_s"),
            std::string::npos);
  // An explicit short duration must still hold the scaled fault times.
  const std::string msg = refusal(R"(name: x
duration_s: 100
short:
  duration_s: 10
  time_scale: 0.5
faults:
  - kind: hard_kill
    at_s: 40
)");
  EXPECT_NE(msg.find("bad.yaml:4: short.duration_s: faults[0] (line 7)"), std::string::npos) << msg;
}

TEST(scenario_validation, slow_node_stop_must_be_shorter_than_period) {
  EXPECT_NE(refusal("name: x\nduration_s: 60\nfaults:\n  - kind: slow_node\n    duration_s: 5\n    "
                    "stop_ms: 500\n    period_ms: 500\n")
                .find("faults[0].stop_ms: must be shorter than period_ms (500)"),
            std::string::npos);
}

TEST(scenario_validation, env_faults_target_env_nodes_and_env_slow_is_a_duty_cycle) {
  auto r = parse_scenario(R"(name: env
duration_s: 60
cluster:
  env: 2
faults:
  - kind: env_kill
    at_s: 5
  - kind: env_slow
    at_s: 10
    duration_s: 20
    stop_ms: 1500
    period_ms: 2000
)",
                          "env.yaml");
  ASSERT_TRUE(r.ok()) << r.err().to_string();
  EXPECT_EQ(r->cluster.env, 2);
  ASSERT_EQ(r->faults.size(), 2u);
  EXPECT_EQ(r->faults[0].kind, fault_kind::env_kill);
  EXPECT_EQ(r->faults[0].target.role, "env");
  EXPECT_TRUE(removes_node(fault_kind::env_kill));
  EXPECT_EQ(r->faults[1].kind, fault_kind::env_slow);
  EXPECT_EQ(r->faults[1].target.role, "env");
  EXPECT_EQ(r->faults[1].stop_ms, 1500);
  EXPECT_TRUE(is_duty_cycle(fault_kind::env_slow));
  EXPECT_FALSE(removes_node(fault_kind::env_slow));
  // env_slow needs its duration, keeps its node, and takes no other kind's parameter.
  EXPECT_NE(refusal("name: x\nduration_s: 60\nfaults:\n  - kind: env_slow\n")
                .find("faults[0].duration_s: is required"),
            std::string::npos);
  EXPECT_NE(refusal("name: x\nduration_s: 60\nfaults:\n  - kind: env_slow\n    duration_s: 5\n"
                    "    replace: true\n")
                .find("faults[0].replace: env_slow leaves its node running"),
            std::string::npos);
  EXPECT_NE(refusal("name: x\nduration_s: 60\nfaults:\n  - kind: env_kill\n    phase: weights\n")
                .find("faults[0].phase: unknown field"),
            std::string::npos);
}

TEST(scenario_validation, replace_on_a_fault_that_keeps_its_node_is_refused) {
  EXPECT_NE(refusal("name: x\nduration_s: 60\nfaults:\n  - kind: partition\n    duration_s: 5\n    "
                    "replace: true\n")
                .find("faults[0].replace: partition leaves its node running"),
            std::string::npos);
}

TEST(scenario_validation, missing_and_empty_sections_are_named) {
  EXPECT_NE(refusal("name: x\nduration_s: 60\n").find("faults: is required"), std::string::npos);
  EXPECT_NE(
      refusal("name: x\nduration_s: 60\nfaults: []\n").find("faults: expected a non-empty list"),
      std::string::npos);
  EXPECT_NE(refusal("duration_s: 60\nfaults: [{kind: hard_kill}]\n").find("name: is required"),
            std::string::npos);
  EXPECT_NE(refusal("- just\n- a list\n").find("(top level)"), std::string::npos);
  EXPECT_NE(refusal("name: x\nduration_s: 60\nfaults:\n  - hard_kill\n")
                .find("bad.yaml:4: faults[0]: expected a mapping"),
            std::string::npos);
}

TEST(scenario_validation, yaml_syntax_error_names_the_line) {
  const std::string msg = refusal("name: x\nduration_s: 60\nfaults:\n  - kind: [hard_kill\n");
  EXPECT_NE(msg.find("bad.yaml:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(syntax)"), std::string::npos) << msg;
}

TEST(scenario_validation, unreadable_file_is_an_io_error_naming_the_path) {
  auto r = load_scenario("/nonexistent/dir/s.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::io_error);
  EXPECT_NE(r.err().message.find("/nonexistent/dir/s.yaml"), std::string::npos);
}

TEST(scenario_validation, short_form_scales_times_and_rates) {
  auto r = parse_scenario(R"(name: x
duration_s: 300
settle_s: 40
replacement: {delay_s: 20}
short:
  time_scale: 0.1
  cluster: {rollout: 3}
faults:
  - kind: spot_notice
    at_s: 100
    spread_s: 50
    deadline_s: 120
  - kind: hard_kill
    rate_per_node_hour: 36
    window_s: [0, 200]
)",
                          "s.yaml");
  ASSERT_TRUE(r.ok()) << r.err().to_string();
  const scenario sh = apply_short_form(*r);
  EXPECT_DOUBLE_EQ(sh.duration_s, 30.0);
  EXPECT_DOUBLE_EQ(sh.settle_s, 4.0);
  EXPECT_DOUBLE_EQ(sh.replacement.delay_s, 2.0);
  EXPECT_EQ(sh.cluster.rollout, 3);
  EXPECT_EQ(sh.cluster.buffer, 2);  // unset short.cluster fields keep the long form's
  EXPECT_DOUBLE_EQ(sh.faults[0].at_s, 10.0);
  EXPECT_DOUBLE_EQ(sh.faults[0].spread_s, 5.0);
  EXPECT_DOUBLE_EQ(sh.faults[0].deadline_s, 12.0);
  EXPECT_DOUBLE_EQ(sh.faults[1].target.rate_per_node_hour, 360.0);
  EXPECT_DOUBLE_EQ(sh.faults[1].target.window_end_s, 20.0);
}

TEST(scenario_validation, shipped_scenarios_all_load) {
  for (const char* name :
       {"spot-storm", "hard-kills", "partition", "shard-loss", "coordinator-restart", "mixed",
        "env-loss", "group-loss", "weights-loss"}) {
    const std::string path = std::string(MOERL_SCENARIO_DIR) + "/" + name + ".yaml";
    auto r = load_scenario(path);
    ASSERT_TRUE(r.ok()) << r.err().to_string();
    EXPECT_EQ(r->name, name);
  }
}

// cluster.trainer_members names the trainer group's members trainer-0 ..; a fault on role
// trainer picks one of them.
TEST(scenario_validation, trainer_members_are_a_group_a_fault_can_target) {
  auto r = load_scenario(std::string(MOERL_SCENARIO_DIR) + "/group-loss.yaml");
  ASSERT_TRUE(r.ok()) << r.err().to_string();
  EXPECT_EQ(r->cluster.trainer_members, 2);
  const auto roster = canonical_roster(r->cluster);
  EXPECT_EQ(roster.at("trainer"), (std::vector<std::string>{"trainer-0", "trainer-1"}));
  auto t = expand(apply_short_form(*r), roster);
  ASSERT_TRUE(t.ok()) << t.err().to_string();
  size_t on_trainer = 0;
  for (const auto& e : *t) on_trainer += e.role == "trainer" ? 1 : 0;
  EXPECT_EQ(on_trainer, 1u);

  auto bad = parse_scenario(
      "name: x\nduration_s: 10\ncluster: {trainer_members: 0}\nfaults: [{kind: hard_kill}]\n",
      "inline.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.err().message.find("trainer_members"), std::string::npos) << bad.err().message;
}

}  // namespace
}  // namespace moerl::sims
