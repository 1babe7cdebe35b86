// The HTTP console's renderers on a fixed snapshot: the Prometheus text (families, labels and
// their escaping), the Chrome trace (lanes, phases placed back from each step's end) and the
// autoscaling signal (formula terms, bounds, replacement times); and the planes table as the
// config sets it. The live routes are tested
// against a real `moerl up` in tests/apps/http_console_test.py.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/config.h"
#include "console/autoscale_signal.h"
#include "console/chrome_trace.h"
#include "console/http_console.h"
#include "console/prometheus_text.h"

namespace moerl::console {
namespace {

using nlohmann::json;

json node(const std::string& name, const std::string& role, const std::string& state,
          uint64_t leases = 0) {
  return json{{"id", name + "-id"}, {"name", name},     {"role", role},
              {"state", state},     {"leases", leases}, {"restarts", 0}};
}

json fixed_snapshot() {
  json its = json::array();
  // Two steps 1 s apart; 100 samples each; trainer busy 0.25 s; 2 ms per generated sample.
  for (int v = 1; v <= 2; ++v)
    its.push_back({{"iteration", v},
                   {"samples", 100},
                   {"mean_reward", 0.5},
                   {"staleness", 0.25},
                   {"t_buffer", 0.5},
                   {"t_train", 0.2},
                   {"t_weights", 0.05},
                   {"t_checkpoint", 0.0},
                   {"t_generate", 0.2},
                   {"t_reward", 0.01},
                   {"t_env", 0.3},
                   {"generate_ms_per_sample", 2.0},
                   {"end_unix_ms", 1000000 + 1000 * v}});
  return json{
      {"status",
       {{"iteration", 2},
        {"iterations", 10},
        {"queue_depth", 3},
        {"leases", 2},
        {"invariant_ok", true},
        {"control_plane",
         {{"accepted", 7},
          {"refused", {{"handshake_timeout", 3}, {"too_many_from_peer", 0}}},
          {"messages", {{"lease", 12}, {"flush", 30}}}}},
        {"accounting",
         {{"dispatched", 10},
          {"committed", 8},
          {"in_flight", 1},
          {"dropped", {{"returned", 1}}},
          {"lost", 0},
          {"duplicated", 0},
          {"trained", 8}}}}},
      {"nodes",
       json::array(
           {node("trainer-0", "trainer", "running"), node("rollout-0", "rollout", "running", 1),
            node("rollout-\"1\"", "rollout", "running", 1), node("env-0", "env", "running")})},
      {"iterations", {{"trainer", "trainer-0"}, {"iterations", its}, {"samples_per_s", 100.0}}},
      {"interruptions",
       json::array({{{"node", "rollout-0"}, {"source", "console"}, {"at", 1001500}}})},
      {"ledger", json::object()}};
}

TEST(http_console_views, PrometheusTextNamesFamiliesAndEscapesLabels) {
  replacement_tracker t;
  auto snap = fixed_snapshot();
  t.observe(snap["nodes"], 0);
  const std::string text = prometheus_text(snap, autoscale_json(snap, t, 1000));
  EXPECT_NE(
      text.find(
          "# TYPE moerl_samples_dispatched_total counter\nmoerl_samples_dispatched_total 10\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("moerl_samples_dropped_total{reason=\"returned\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("moerl_nodes{role=\"rollout\",state=\"running\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("moerl_node_leases{node=\"rollout-\\\"1\\\"\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("moerl_iteration_phase_seconds{phase=\"train\"} 0.20"), std::string::npos);
  EXPECT_NE(text.find("moerl_iteration_phase_seconds{phase=\"env\"} 0.29"), std::string::npos)
      << text;
  EXPECT_NE(text.find("moerl_interruptions_total{source=\"console\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("moerl_desired_replicas{role=\"rollout\"} "), std::string::npos);
  EXPECT_NE(text.find("moerl_control_plane_tls_accepted_total 7\n"), std::string::npos);
  EXPECT_NE(text.find("moerl_control_plane_tls_refused_total{reason=\"handshake_timeout\"} 3\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE moerl_coordinator_messages_total counter\n"
                      "moerl_coordinator_messages_total{kind=\"flush\"} 30\n"
                      "moerl_coordinator_messages_total{kind=\"lease\"} 12\n"),
            std::string::npos)
      << text;
}

TEST(http_console_views, TracePlacesTrainerPhasesBackFromTheStepEnd) {
  const json tr = chrome_trace(fixed_snapshot());
  int lanes = 0;
  std::vector<json> train;
  for (const auto& e : tr["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") ++lanes;
    if (e["ph"] == "X" && e["name"] == "train") train.push_back(e);
  }
  EXPECT_EQ(lanes, 4);
  ASSERT_EQ(train.size(), 2u);
  // The first step spans 0.75 s and ends at +0.75 s: train is [0.5, 0.7] s; the second step
  // ends 1 s later.
  EXPECT_NEAR(train[0]["ts"].get<double>(), 0.5e6, 1);
  EXPECT_NEAR(train[0]["dur"].get<double>(), 0.2e6, 1);
  EXPECT_NEAR(train[1]["ts"].get<double>(), 1.5e6, 1);
  int generate = 0;
  for (const auto& e : tr["traceEvents"])
    if (e["ph"] == "X" && e["name"] == "generate") {
      ++generate;
      EXPECT_NEAR(e["dur"].get<double>(), 0.1e6, 1);  // 0.2 s summed over two rollout lanes
    }
  EXPECT_EQ(generate, 4);
  // Env time: its sum on the one env lane, from the previous step's end like generation.
  int env = 0;
  for (const auto& e : tr["traceEvents"])
    if (e["ph"] == "X" && e["name"] == "env") {
      ++env;
      EXPECT_EQ(e["cat"], "env");
      EXPECT_NEAR(e["dur"].get<double>(), 0.3e6, 1);
    }
  EXPECT_EQ(env, 2);
}

TEST(http_console_views, TraceShowsEachNodesWeightFetchFromTheAnnouncementToWhenItHeldTheVersion) {
  json snap = fixed_snapshot();
  // rollout-0 held version 1 0.12 s after its step ended, version 2 0.3 s after; version 7 is
  // not one of the iterations shown (no span), and a time before the announcement is skipped.
  snap["nodes"][1]["stats"] = {
      {"weights",
       {{"held_unix_ms", {{"1", 1001000 + 120}, {"2", 1002000 + 300}, {"7", 1003000}}}}}};
  snap["nodes"][2]["stats"] = {{"weights", {{"held_unix_ms", {{"1", 1000500}}}}}};
  const json tr = chrome_trace(snap);
  std::vector<json> fetch;
  int rollout0_lane = -1;
  for (const auto& e : tr["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name" &&
        e["args"]["name"].get<std::string>().rfind("rollout-0 ", 0) == 0)
      rollout0_lane = e["tid"].get<int>();
    if (e["ph"] == "X" && e["name"] == "weights fetch") fetch.push_back(e);
  }
  ASSERT_EQ(fetch.size(), 2u);
  for (const auto& e : fetch) EXPECT_EQ(e["tid"].get<int>(), rollout0_lane);
  // Origin: the first step's start, 0.75 s before its end at 1001000 ms.
  EXPECT_NEAR(fetch[0]["ts"].get<double>(), 0.75e6, 1);
  EXPECT_NEAR(fetch[0]["dur"].get<double>(), 0.12e6, 1);
  EXPECT_NEAR(fetch[1]["ts"].get<double>(), 1.75e6, 1);
  EXPECT_NEAR(fetch[1]["dur"].get<double>(), 0.3e6, 1);
}

TEST(http_console_views, AutoscaleFollowsTheFormulaAndItsBounds) {
  auto snap = fixed_snapshot();
  replacement_tracker t;
  t.observe(snap["nodes"], 0);
  // consumption 100 / 0.25 = 400 samples/s; generation 1000 / 2 = 500: base 0.8 -> 1.
  json a = autoscale_json(snap, t, 1000);
  EXPECT_NEAR(a["terms"]["base"].get<double>(), 0.8, 1e-9);
  EXPECT_EQ(a["desired_replicas"]["rollout"], 1);
  // A trainer 10x faster wants 8 rollouts, bounded by the 5 units to lease.
  for (auto& it : snap["iterations"]["iterations"]) it["t_train"] = 0.0;
  for (auto& it : snap["iterations"]["iterations"]) it["t_weights"] = 0.025;
  a = autoscale_json(snap, t, 1000);
  EXPECT_NEAR(a["terms"]["base"].get<double>(), 8.0, 1e-9);
  EXPECT_EQ(a["desired_replicas"]["rollout"], 5);
  snap["status"]["done"] = true;
  EXPECT_EQ(autoscale_json(snap, t, 1000)["desired_replicas"]["rollout"], 0);
}

TEST(http_console_views, ReplacementTimeRunsFromLossToFirstLease) {
  replacement_tracker t;
  t.observe(json::array({node("rollout-0", "rollout", "running", 1)}), 0);
  EXPECT_LT(t.mean_replacement_s(), 0);
  t.observe(json::array({node("rollout-0", "rollout", "drained")}), 1000);
  json fresh = node("rollout-0-r1", "rollout", "running", 0);
  t.observe(json::array({node("rollout-0", "rollout", "drained"), fresh}), 2000);
  EXPECT_LT(t.mean_replacement_s(), 0);  // joined, not productive yet
  fresh["leases"] = 1;
  t.observe(json::array({node("rollout-0", "rollout", "drained"), fresh}), 4000);
  EXPECT_DOUBLE_EQ(t.mean_replacement_s(), 3.0);
  EXPECT_EQ(t.num_replacements(), 1u);
}

// The dashboard once said weights travel by "object store" while, by default, they come from
// a checkpoint cache over shared memory: the planes table follows weights.* now.
TEST(http_console_views, PlanesSayWhereWeightsComeFromAsConfigured) {
  auto weights_of = [](std::vector<std::string> overrides) {
    auto cfg = config::load("", overrides);
    EXPECT_TRUE(cfg.ok()) << (cfg.ok() ? "" : cfg.err().to_string());
    return configured_planes(*cfg)["weights"];
  };
  const json by_default = weights_of({});
  EXPECT_NE(by_default["transport"].get<std::string>().find("checkpoint cache"), std::string::npos)
      << by_default;
  EXPECT_NE(by_default["path"].get<std::string>().find("shared memory"), std::string::npos)
      << by_default;
  const json fanout = weights_of({"weights.fanout=true"});
  EXPECT_NE(fanout["path"].get<std::string>().find("fan-out"), std::string::npos) << fanout;
  const json no_shm = weights_of({"weights.same_host_shm=false"});
  EXPECT_EQ(no_shm["path"], "ZeroMQ chunks") << no_shm;
  const json store_only = weights_of({"weights.from_cache=false"});
  EXPECT_NE(store_only["transport"].get<std::string>().find("object store"), std::string::npos)
      << store_only;
  EXPECT_FALSE(store_only.contains("path")) << store_only;
}

}  // namespace
}  // namespace moerl::console
