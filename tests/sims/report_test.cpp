// Report building from given measurements: the JSON carries every required field, and each
// invariant fails when (and only when) its condition breaks.
#include <gtest/gtest.h>

#include "sims/report.h"

namespace moerl::sims {
namespace {

nlohmann::json balanced_accounting() {
  // 100 = 80 + 8 + (10 + 2)
  return {{"dispatched", 100}, {"committed", 80},
          {"in_flight", 8},    {"dropped", {{"stale_attempt", 10}, {"stale_policy", 2}}},
          {"lost", 0},         {"duplicated", 0},
          {"trained", 64}};
}

fault_record fault(fault_kind k, const std::string& node, double inj, double det, double rec) {
  fault_record f;
  f.planned.kind = k;
  f.planned.node = node;
  f.planned.role = "rollout";
  f.planned.at_s = inj;
  f.node = node;
  f.injected_at = inj;
  f.detected_at = det;
  f.recovered_at = rec;
  return f;
}

run_measurements healthy_run() {
  run_measurements m;
  m.scenario = "unit";
  m.seed = 3;
  m.target = "local cluster";
  m.accounting = balanced_accounting();
  m.faults.push_back(fault(fault_kind::hard_kill, "rollout-1", 5.0, 6.5, 12.0));
  m.faults.back().replacement = "rollout-1r";
  m.faults.push_back(fault(fault_kind::spot_notice, "rollout-2", 7.0, 7.1, 15.0));
  m.iteration_s = {2.0, 3.0, 4.0};
  m.baseline_iteration_s = {2.0, 2.0};
  m.trainer_stall_s = 1.25;
  m.observed_s = 40.0;
  m.baseline_trainer_stall_s = 0.5;
  m.baseline_observed_s = 15.0;
  m.faults[0].trainer_stall_s = 0.75;
  return m;
}

const invariant_verdict& find(const std::vector<invariant_verdict>& v, const std::string& name) {
  for (const auto& x : v) {
    if (x.name == name) return x;
  }
  static invariant_verdict missing{"missing", false, ""};
  ADD_FAILURE() << "no invariant " << name;
  return missing;
}

TEST(report, healthy_run_passes_every_invariant) {
  const run_measurements m = healthy_run();
  const auto v = evaluate_invariants(m);
  for (const auto& x : v) EXPECT_TRUE(x.ok) << x.name << ": " << x.detail;
  EXPECT_EQ(overall_verdict(m, v), "pass");
  EXPECT_GE(v.size(), 9u);
}

TEST(report, json_carries_the_required_fields) {
  const run_measurements m = healthy_run();
  const auto r = report_json(m, evaluate_invariants(m), {{"commit", "abc"}});
  for (const char* key : {"scenario", "faults", "accounting", "trainer_stall_s", "iteration_s",
                          "baseline_iteration_s", "invariants", "verdict", "provenance"}) {
    EXPECT_TRUE(r.contains(key)) << key;
  }
  ASSERT_EQ(r["faults"].size(), 2u);
  const auto& f = r["faults"][0];
  EXPECT_EQ(f["kind"], "hard_kill");
  EXPECT_EQ(f["node"], "rollout-1");
  EXPECT_DOUBLE_EQ(f["injected_at"].get<double>(), 5.0);
  EXPECT_DOUBLE_EQ(f["detected_at"].get<double>(), 6.5);
  EXPECT_DOUBLE_EQ(f["recovered_at"].get<double>(), 12.0);
  EXPECT_DOUBLE_EQ(f["recovery_s"].get<double>(), 7.0);
  EXPECT_EQ(f["replacement"], "rollout-1r");
  EXPECT_DOUBLE_EQ(r["mean_iteration_s"].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(r["baseline_mean_iteration_s"].get<double>(), 2.0);
  EXPECT_EQ(r["accounting"]["dropped"]["stale_attempt"], 10);
  for (const auto& x : r["invariants"]) {
    EXPECT_TRUE(x.contains("name") && x.contains("ok"));
  }
}

TEST(report, times_that_never_happened_are_null) {
  run_measurements m = healthy_run();
  m.faults[0].recovered_at = -1;
  const auto r = report_json(m, evaluate_invariants(m), nullptr);
  EXPECT_TRUE(r["faults"][0]["recovered_at"].is_null());
  EXPECT_FALSE(r["faults"][0].contains("recovery_s"));
  EXPECT_EQ(r["verdict"], "fail");
}

TEST(report, a_lost_sample_fails_the_run) {
  run_measurements m = healthy_run();
  m.accounting["lost"] = 1;
  m.accounting["committed"] = 79;  // keeps the equation balanced: only `lost` is wrong
  m.accounting["dispatched"] = 99;
  const auto v = evaluate_invariants(m);
  EXPECT_FALSE(find(v, "lost_is_zero").ok);
  EXPECT_TRUE(find(v, "accounting_balances").ok);
  EXPECT_EQ(overall_verdict(m, v), "fail");
}

TEST(report, a_duplicated_sample_fails_the_run) {
  run_measurements m = healthy_run();
  m.accounting["duplicated"] = 2;
  const auto v = evaluate_invariants(m);
  EXPECT_FALSE(find(v, "duplicated_is_zero").ok);
  EXPECT_EQ(find(v, "duplicated_is_zero").detail, "2");
}

TEST(report, unbalanced_accounting_names_both_sides) {
  run_measurements m = healthy_run();
  m.accounting["dropped"]["filtered"] = 1;
  const auto v = evaluate_invariants(m);
  const auto& x = find(v, "accounting_balances");
  EXPECT_FALSE(x.ok);
  EXPECT_NE(x.detail.find("dispatched 100"), std::string::npos) << x.detail;
  EXPECT_NE(x.detail.find("= 101"), std::string::npos) << x.detail;
}

TEST(report, trained_beyond_committed_fails) {
  run_measurements m = healthy_run();
  m.accounting["trained"] = 81;
  EXPECT_FALSE(find(evaluate_invariants(m), "trained_at_most_committed").ok);
}

TEST(report, missing_or_malformed_accounting_fails_instead_of_passing_vacuously) {
  run_measurements m = healthy_run();
  m.accounting = nullptr;
  auto v = evaluate_invariants(m);
  EXPECT_FALSE(find(v, "accounting_reported").ok);
  EXPECT_FALSE(find(v, "lost_is_zero").ok);
  EXPECT_FALSE(find(v, "accounting_balances").ok);
  EXPECT_EQ(overall_verdict(m, v), "fail");

  m.accounting = balanced_accounting();
  m.accounting["in_flight"] = -3;
  v = evaluate_invariants(m);
  EXPECT_FALSE(find(v, "accounting_reported").ok);
  EXPECT_NE(find(v, "accounting_reported").detail.find("in_flight"), std::string::npos);

  m.accounting = balanced_accounting();
  m.accounting["dropped"]["stale_policy"] = "two";
  EXPECT_FALSE(find(evaluate_invariants(m), "accounting_reported").ok);
}

TEST(report, a_job_that_committed_nothing_does_not_pass) {
  run_measurements m = healthy_run();
  m.accounting = {
      {"dispatched", 0}, {"committed", 0},  {"in_flight", 0}, {"dropped", nlohmann::json::object()},
      {"lost", 0},       {"duplicated", 0}, {"trained", 0}};
  EXPECT_FALSE(find(evaluate_invariants(m), "job_made_progress").ok);
}

TEST(report, trainer_restart_fails_unless_the_trainer_was_a_target) {
  run_measurements m = healthy_run();
  m.trainer_restarts = 1;
  m.ungrouped_trainer_restarts = 1;
  EXPECT_FALSE(find(evaluate_invariants(m), "trainer_not_restarted_by_rollout_loss").ok);
  m.faults.push_back(fault(fault_kind::hard_kill, "trainer-1", 9, 9.5, 20));
  m.faults.back().planned.role = "trainer";
  const auto v = evaluate_invariants(m);
  const auto& x = find(v, "trainer_not_restarted_by_rollout_loss");
  EXPECT_TRUE(x.ok);
  EXPECT_NE(x.detail.find("not judged"), std::string::npos);
}

// A trainer group's re-formations are listed apart from trainer restarts; each needs a fault
// on a member to explain it, whatever member the coordinator named first.
TEST(report, trainer_group_reformations_need_a_fault_on_a_member) {
  run_measurements m = healthy_run();
  m.trainer_restarts = 2;  // both members' trainers restarted with the group
  m.trainer_group_reformations = nlohmann::json::array({{{"group", "trainer"},
                                                         {"at", 10.0},
                                                         {"cause", "trainer-1 monitor: lost"},
                                                         {"restored_version", 4},
                                                         {"downtime_s", 0.3}}});
  auto x = find(evaluate_invariants(m), "trainer_not_restarted_by_rollout_loss");
  EXPECT_FALSE(x.ok) << x.detail;  // no fault on a member: a rollout loss restarted it
  EXPECT_NE(x.detail.find("trainer-1 monitor: lost"), std::string::npos) << x.detail;

  m.faults.push_back(fault(fault_kind::hard_kill, "trainer-1", 9, 9.5, 20));
  m.faults.back().planned.role = "trainer";
  m.faults.back().group = "trainer";
  x = find(evaluate_invariants(m), "trainer_not_restarted_by_rollout_loss");
  EXPECT_TRUE(x.ok) << x.detail;
  EXPECT_NE(x.detail.find("1 trainer group re-formation(s), each from a fault on a member"),
            std::string::npos)
      << x.detail;
  // A fault on a group member leaves trainers in no group judged.
  m.ungrouped_trainer_restarts = 1;
  EXPECT_FALSE(find(evaluate_invariants(m), "trainer_not_restarted_by_rollout_loss").ok);
  m.ungrouped_trainer_restarts = 0;

  // A second re-formation with one fault: one is unexplained, even if it names the survivor.
  m.trainer_group_reformations.push_back(
      {{"group", "trainer"}, {"at", 30.0}, {"cause", "trainer-0 train step: timeout"}});
  x = find(evaluate_invariants(m), "trainer_not_restarted_by_rollout_loss");
  EXPECT_FALSE(x.ok) << x.detail;
  EXPECT_NE(x.detail.find("1 not from a fault on a member: trainer-0 train step"),
            std::string::npos)
      << x.detail;

  const auto j = report_json(m, evaluate_invariants(m), nlohmann::json::object());
  ASSERT_EQ(j["trainer_group_reformations"].size(), 2u);
  EXPECT_NE(human_summary(j).find("trainer group trainer re-formed: trainer-1 monitor: lost; "
                                  "down 0.30s, restored version 4"),
            std::string::npos)
      << human_summary(j);
}

TEST(report, undetected_fault_fails_but_an_undetected_slow_node_does_not) {
  run_measurements m = healthy_run();
  m.faults[1].detected_at = -1;
  auto x = find(evaluate_invariants(m), "every_fault_detected");
  EXPECT_FALSE(x.ok);
  EXPECT_NE(x.detail.find("spot_notice rollout-2"), std::string::npos) << x.detail;

  m = healthy_run();
  m.faults.push_back(fault(fault_kind::slow_node, "rollout-3", 3, -1, 9));
  EXPECT_TRUE(find(evaluate_invariants(m), "every_fault_detected").ok);
}

TEST(report, skipped_faults_are_not_judged_and_all_skipped_means_skipped) {
  run_measurements m = healthy_run();
  m.faults.push_back(fault(fault_kind::partition, "rollout-3", -1, -1, -1));
  m.faults.back().skipped = "network namespaces unavailable: Operation not permitted";
  auto v = evaluate_invariants(m);
  EXPECT_TRUE(find(v, "every_fault_recovered").ok);
  EXPECT_EQ(overall_verdict(m, v), "pass");

  m.faults.erase(m.faults.begin(), m.faults.begin() + 2);
  v = evaluate_invariants(m);
  EXPECT_EQ(overall_verdict(m, v), "skipped");
  // ... but not when the job broke an invariant on its own.
  run_measurements broken = m;
  broken.accounting["duplicated"] = 24;
  EXPECT_EQ(overall_verdict(broken, evaluate_invariants(broken)), "fail");
  const std::string text = human_summary(report_json(m, v, nullptr));
  EXPECT_NE(text.find("partition rollout-3: skipped (network namespaces unavailable"),
            std::string::npos)
      << text;
}

TEST(report, a_node_lost_without_a_fault_fails_the_run) {
  run_measurements m = healthy_run();
  m.collateral_losses = {"buffer-1 (dead)"};
  const auto v = evaluate_invariants(m);
  EXPECT_FALSE(find(v, "no_collateral_node_loss").ok);
  EXPECT_NE(find(v, "no_collateral_node_loss").detail.find("buffer-1 (dead)"), std::string::npos);
  EXPECT_EQ(overall_verdict(m, v), "fail");
}

TEST(report, unreported_trainer_stall_is_null_not_zero) {
  run_measurements m = healthy_run();
  m.trainer_stall_s = -1;
  const auto r = report_json(m, evaluate_invariants(m), nullptr);
  EXPECT_TRUE(r["trainer_stall_s"].is_null());
  EXPECT_TRUE(r["trainer_stall_fraction"].is_null());
  EXPECT_NE(human_summary(r).find("trainer stalled (not reported)"), std::string::npos);
}

TEST(report, trainer_stall_is_reported_per_run_per_baseline_and_per_fault) {
  const run_measurements m = healthy_run();
  const auto r = report_json(m, evaluate_invariants(m), nullptr);
  EXPECT_DOUBLE_EQ(r["trainer_stall_s"].get<double>(), 1.25);
  EXPECT_DOUBLE_EQ(r["trainer_stall_fraction"].get<double>(), 1.25 / 40.0);
  EXPECT_DOUBLE_EQ(r["baseline_trainer_stall_s"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(r["baseline_trainer_stall_fraction"].get<double>(), 0.5 / 15.0);
  EXPECT_DOUBLE_EQ(r["faults"][0]["trainer_stall_s"].get<double>(), 0.75);
  EXPECT_FALSE(r["faults"][1].contains("trainer_stall_s"));  // not measured for that one
}

TEST(report, human_summary_shows_verdict_faults_accounting_and_invariants) {
  run_measurements m = healthy_run();
  m.faults[0].recovered_at = -1;
  const std::string text = human_summary(report_json(m, evaluate_invariants(m), nullptr));
  EXPECT_NE(text.find("scenario unit (seed 3) against local cluster: fail"), std::string::npos)
      << text;
  EXPECT_NE(
      text.find(
          "hard_kill rollout-1: injected 5.00s, detected 6.50s, recovered never by rollout-1r"),
      std::string::npos)
      << text;
  EXPECT_NE(
      text.find("dispatched 100, committed 80, in flight 8, trained 64, lost 0, duplicated 0"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("dropped: stale_attempt=10 stale_policy=2"), std::string::npos) << text;
  EXPECT_NE(text.find("[FAIL] every_fault_recovered"), std::string::npos) << text;
  EXPECT_NE(text.find("iterations: 3, mean 3.00s; baseline 2, mean 2.00s\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("trainer stalled 1.25s of 40.0s (3%); baseline 0.50s of 15.0s (3%)"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace moerl::sims
