// One shipped scenario's short form (MOERL_SIM_SCENARIO names it) run end to end by the
// real binary against a real local cluster: `moerl sim run FILE --short --json --report R`.
// The JSON must carry every required field and every invariant must hold: lost = 0,
// duplicated = 0, the accounting balances, every fault detected and recovered.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace {

std::string scenario_name() {
  const char* s = std::getenv("MOERL_SIM_SCENARIO");
  return s ? s : "";
}

TEST(scenario_short, runs_with_every_invariant_holding) {
  const std::string name = scenario_name();
  ASSERT_FALSE(name.empty()) << "set MOERL_SIM_SCENARIO";
  const std::string file = std::string(MOERL_SCENARIO_DIR) + "/" + name + ".yaml";
  const std::string report = "/tmp/moerl-sim-" + name + "-" + std::to_string(::getpid()) + ".json";
  const std::string cmd = std::string(MOERL_BINARY) + " sim run " + file +
                          " --short --json --report " + report + " > /dev/null";
  const int rc = std::system(cmd.c_str());
  std::ifstream in(report);
  ASSERT_TRUE(in.good()) << "no report from: " << cmd << " (exit " << rc << ")";
  std::stringstream ss;
  ss << in.rdbuf();
  std::remove(report.c_str());
  const auto r = nlohmann::json::parse(ss.str(), nullptr, false);
  ASSERT_FALSE(r.is_discarded()) << "report is not JSON";

  for (const char* key : {"scenario", "faults", "accounting", "trainer_stall_s", "iteration_s",
                          "baseline_iteration_s", "invariants", "verdict", "provenance"}) {
    EXPECT_TRUE(r.contains(key)) << key;
  }
  EXPECT_EQ(r["scenario"], name);
  // The trainer reports how long it waited for data, in the fault run and the baseline.
  EXPECT_TRUE(r["trainer_stall_s"].is_number()) << r["trainer_stall_s"];
  EXPECT_GE(r.value("trainer_stall_s", -1.0), 0.0);
  EXPECT_TRUE(r["baseline_trainer_stall_s"].is_number()) << r["baseline_trainer_stall_s"];
  ASSERT_TRUE(r["accounting"].is_object()) << r.dump(2);
  EXPECT_EQ(r["accounting"]["lost"], 0);
  EXPECT_EQ(r["accounting"]["duplicated"], 0);
  ASSERT_FALSE(r["faults"].empty());
  size_t injected = 0;
  for (const auto& f : r["faults"]) {
    for (const char* key : {"kind", "node", "injected_at", "detected_at", "recovered_at"}) {
      EXPECT_TRUE(f.contains(key)) << key << " in " << f.dump();
    }
    if (f.contains("skipped")) {
      std::cout << "skipped: " << f.dump() << "\n";
      continue;
    }
    ++injected;
  }
  for (const auto& x : r["invariants"]) {
    EXPECT_TRUE(x["ok"].get<bool>()) << x["name"] << ": " << x["detail"];
  }
  // The environment plane's faults fail episodes (counted by reason on the rollout nodes).
  if (name == "env-loss") {
    uint64_t failed = 0;
    // A named copy: a range-for over items() of the temporary value() returns would read a
    // destroyed object (the temporary ends before the loop runs).
    const auto by_reason = r.value("env_episodes_failed", nlohmann::json::object());
    for (const auto& [why, n] : by_reason.items()) failed += n.get<uint64_t>();
    EXPECT_GT(failed, 0u) << r["env_episodes_failed"];
  }
  // A trainer member's loss re-forms the group: listed with its cause and downtime, apart from
  // trainer restarts (the invariants above judged that a rollout loss caused none).
  if (name == "group-loss") {
    const auto reformed = r.value("trainer_group_reformations", nlohmann::json::array());
    ASSERT_FALSE(reformed.empty()) << r.dump(2);
    EXPECT_TRUE(reformed[0]["downtime_s"].is_number()) << reformed.dump();
    // Named by the member lost, or by a survivor whose step failed first.
    EXPECT_EQ(reformed[0].value("cause", std::string()).rfind("trainer-", 0), 0u)
        << reformed.dump();
    // The rollout kill hit a member of the 2-node rollout group: it re-formed (only it).
    const auto rollout = r.value("rollout_group_reformations", nlohmann::json::array());
    ASSERT_FALSE(rollout.empty()) << r.dump(2);
    EXPECT_EQ(rollout[0].value("cause", std::string()).rfind("rollout-", 0), 0u) << rollout.dump();
  }
  // A notice and partitions aimed at members: the trainer group re-formed once (its cut
  // member, fenced and recreated), the rollout group twice (the drain, the cut member).
  if (name == "member-faults" && r["verdict"] != "skipped") {
    const auto trainer = r.value("trainer_group_reformations", nlohmann::json::array());
    ASSERT_EQ(trainer.size(), 1u) << trainer.dump();
    EXPECT_TRUE(trainer[0]["downtime_s"].is_number()) << trainer.dump();
    const auto rollout = r.value("rollout_group_reformations", nlohmann::json::array());
    EXPECT_GE(rollout.size(), 2u) << rollout.dump();
  }
  if (r["verdict"] == "skipped") GTEST_SKIP() << "every fault was skipped: " << r["faults"].dump();
  EXPECT_GT(injected, 0u);
  EXPECT_EQ(r["verdict"], "pass") << r.dump(2);
  EXPECT_EQ(rc, 0);
}

}  // namespace
