// The run report's weight-plane figures (up/weights_report.h): per version the delay from
// "a cache holds it" to each rollout node holding it, bytes summed over rollout nodes only,
// and a replacement's time_to_productive_s as the sum of its phases (null until all reached).
#include "up/weights_report.h"

#include <gtest/gtest.h>

namespace moerl::up {
namespace {

using nlohmann::json;

json rollout(const std::string& name, json weights, json timeline = json::object()) {
  return {{"name", name},
          {"role", "rollout"},
          {"stats", {{"weights", std::move(weights)}, {"timeline", std::move(timeline)}}}};
}

TEST(weights_report, RedistributionDelaysAndBytesFromRolloutNodes) {
  const json trainer{{"weights",
                      {{"versions",
                        {{{"version", 1},
                          {"bytes", 100},
                          {"t_publish", 0.5},
                          {"via", "cache"},
                          {"held_unix_ms", 10000}}}},
                       {"durable_writes", 1}}}};
  const json nodes{rollout("rollout-0", {{"bytes_from", {{"cache", 100}}},
                                         {"held_unix_ms", {{"1", 10200}}},
                                         {"held_bytes_from", {{"1", {100, 0, 0}}}}}),
                   rollout("rollout-1", {{"bytes_from", {{"store", 100}}},
                                         {"held_unix_ms", {{"1", 10600}}},
                                         {"held_bytes_from", {{"1", {0, 0, 100}}}},
                                         {"store_fallbacks", 1}}),
                   rollout("rollout-2", {{"bytes_from", {{"peer", 100}}},
                                         {"held_unix_ms", {{"1", 10400}}},
                                         // garbled entries are skipped, not summed
                                         {"held_bytes_from", {{"1", {0, 100, 0}}, {"2", "x"}}}}),
                   // Not a rollout node: its bytes are a cache's, not a reader's.
                   {{"name", "weights-1"},
                    {"role", "weights"},
                    {"stats", {{"weights", {{"bytes_from", {{"peer", 100}}}}}}}}};
  const json w = weights_report(trainer, nodes);
  EXPECT_EQ(w["bytes_from"], (json{{"cache", 100}, {"peer", 100}, {"store", 100}}));
  EXPECT_EQ(w["store_fallbacks"], 1);
  EXPECT_EQ(w["durable_writes"], 1);
  ASSERT_EQ(w["versions"].size(), 1u);
  const json& v = w["versions"][0];
  EXPECT_EQ(v["num_readers"], 3);
  EXPECT_EQ(v["bytes_from"], (json{{"cache", 100}, {"peer", 100}, {"store", 100}}));
  EXPECT_EQ(v["via"], "cache");
  EXPECT_DOUBLE_EQ(v["t_redistribute_max"].get<double>(), 0.6);
  EXPECT_GE(v["t_redistribute_p50"].get<double>(), 0.2);
  EXPECT_LE(v["t_redistribute_p50"].get<double>(), 0.6);
}

TEST(weights_report, RedistributionNullForAVersionNoRolloutNodeRead) {
  const json trainer{{"weights",
                      {{"versions",
                        {{{"version", 1}, {"bytes", 100}, {"held_unix_ms", 10000}},
                         {{"version", 2}, {"bytes", 100}, {"held_unix_ms", 11000}}}}}}};
  // rollout-0 skipped version 1 (it read 2 first).
  const json nodes{
      rollout("rollout-0", {{"bytes_from", {{"cache", 100}}}, {"held_unix_ms", {{"2", 11100}}}})};
  const json w = weights_report(trainer, nodes);
  ASSERT_EQ(w["versions"].size(), 2u);
  EXPECT_EQ(w["versions"][0]["num_readers"], 0);
  EXPECT_TRUE(w["versions"][0]["t_redistribute_p50"].is_null());
  EXPECT_TRUE(w["versions"][0]["t_redistribute_max"].is_null());
  // A node without per-version sources (an older node's stats): zeros, not an error.
  EXPECT_EQ(w["versions"][1]["bytes_from"], (json{{"cache", 0}, {"peer", 0}, {"store", 0}}));
  EXPECT_DOUBLE_EQ(w["versions"][1]["t_redistribute_max"].get<double>(), 0.1);
}

TEST(weights_report, NullWithoutTrainerWeights) {
  EXPECT_TRUE(weights_report(json::object(), json::array()).is_null());
}

TEST(weights_report, TimeToProductiveSumsThePhases) {
  const json nodes{
      rollout("rollout-1-r1", {{"first_weights_unix_ms", 1300}},
              {{"start_unix_ms", 1100}, {"join_unix_ms", 1200}, {"first_commit_unix_ms", 1700}})};
  const json r =
      with_time_to_productive({{"replacement", "rollout-1-r1"}, {"role", "rollout"}}, 1000, nodes);
  EXPECT_DOUBLE_EQ(r["time_to_productive_s"].get<double>(), 0.7);
  EXPECT_DOUBLE_EQ(r["phases"]["first_commit"].get<double>(), 0.4);
}

TEST(weights_report, TimeToProductiveNullUntilEveryPhaseIsReached) {
  const json nodes{
      rollout("rollout-1-r1", json::object(), {{"start_unix_ms", 1100}, {"join_unix_ms", 1200}})};
  const json r =
      with_time_to_productive({{"replacement", "rollout-1-r1"}, {"role", "rollout"}}, 1000, nodes);
  EXPECT_TRUE(r["time_to_productive_s"].is_null());
  EXPECT_DOUBLE_EQ(r["phases"]["join"].get<double>(), 0.1);
  EXPECT_TRUE(r["phases"]["weights"].is_null());
  // A node never seen: every phase null.
  EXPECT_TRUE(
      with_time_to_productive({{"replacement", "x"}}, 1000, json::array())["phases"]["start"]
          .is_null());
}

}  // namespace
}  // namespace moerl::up
