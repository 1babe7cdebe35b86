// The fleet bench's figures (bench/fleet/fleet_analysis.h) from hand-made host records: the
// numbers a run reports must mean what its README says they mean.
#include "bench/fleet/fleet_analysis.h"

#include <gtest/gtest.h>

namespace moerl::bench {
namespace {

using nlohmann::json;

// A host that finished `per_bin` units in every 100 ms bin of [from_bin, to_bin).
json steady_host(int64_t from_bin, int64_t to_bin, uint64_t per_bin) {
  json bins = json::array();
  for (int64_t b = from_bin; b < to_bin; ++b) bins.push_back({b, per_bin});
  return {{"finished_per_100ms", bins}};
}

TEST(fleet_analysis, RecordsOfSeveralHostsAddUp) {
  json a = steady_host(0, 10, 2), b = steady_host(5, 10, 1);
  a["lease_rtt"] = json::array({json::array({100.0, 500.0, 1.0})});
  b["lease_rtt"] = json::array({json::array({200.0, 1500.0, 4.0})});
  a["refusals"] = {{"not_found", 3}};
  b["refusals"] = {{"not_found", 4}, {"timeout", 1}};
  auto m = merge_fleet_records({a, b});
  EXPECT_EQ(m.refusals["not_found"], 7);
  EXPECT_EQ(m.refusals["timeout"], 1);
  // Bins 0..9 hold 2 each, bins 5..9 one more: 25 units in one second.
  EXPECT_DOUBLE_EQ(units_per_s_in(m, 0, 1000), 25.0);
  auto l = lease_latency_in(m, 0, 1000);
  EXPECT_EQ(l["n"], 2);
  EXPECT_EQ(l["units_granted"], 5);
  EXPECT_DOUBLE_EQ(l["max_us"].get<double>(), 1500.0);
  EXPECT_EQ(lease_latency_in(m, 150, 1000)["n"], 1);  // by reply time
}

TEST(fleet_analysis, RecoveryIsCountedFromTheTroughNotFromTheFirstGoodWindow) {
  // 10 units per 100 ms, except a hole from 2.0 s to 3.0 s after the fault at 0: the first
  // windows are still fine, the trough comes later, and full rate is back once a whole
  // window lies after the hole (it ends at 4.0 s; at 0.9 the window ending at 3.9 s, one
  // empty bin in ten, would already count).
  json h = steady_host(0, 20, 10);
  for (int64_t b = 30; b < 100; ++b) h["finished_per_100ms"].push_back({b, 10});
  auto m = merge_fleet_records({h});
  auto r = throughput_recovery(m, 0, 10000, 100.0, 0.95, 1000);
  EXPECT_DOUBLE_EQ(r["lowest_ratio"].get<double>(), 0.0);
  EXPECT_NEAR(r["lowest_window_start_s"].get<double>(), 2.0, 1e-9);
  EXPECT_NEAR(r["recovered_s"].get<double>(), 4.0, 1e-9);
  // A 2 s window holding the whole hole is at 0.5 (its trough), and it is back at 0.95 once
  // at most one empty bin in twenty is left: the window [2.9, 4.9) s.
  auto wide = throughput_recovery(m, 0, 10000, 100.0, 0.95, 2000);
  EXPECT_NEAR(wide["lowest_ratio"].get<double>(), 0.5, 1e-9);
  EXPECT_NEAR(wide["recovered_s"].get<double>(), 4.9, 1e-9);
}

TEST(fleet_analysis, NoDipMeansRecoveredAtOnceAndNoComebackMeansNull) {
  auto flat = merge_fleet_records({steady_host(0, 100, 10)});
  EXPECT_DOUBLE_EQ(
      throughput_recovery(flat, 0, 10000, 100.0, 0.9, 1000)["recovered_s"].get<double>(), 0.0);
  auto dead = merge_fleet_records({steady_host(0, 10, 10)});
  EXPECT_TRUE(throughput_recovery(dead, 0, 10000, 100.0, 0.9, 1000)["recovered_s"].is_null());
}

TEST(fleet_analysis, AUnitCountsAsLeasedAgainOnlyUnderAHigherAttempt) {
  json h;
  // Unit 7 attempt 1 lost at 1000 ms; a late grant of attempt 1 (a duplicate view) does not
  // count, attempt 2 at 3500 ms does. Unit 8 is never leased again.
  h["grants"] = json::array({json::array({1200.0, 7.0, 1.0}), json::array({3500.0, 7.0, 2.0}),
                             json::array({500.0, 8.0, 1.0})});
  auto m = merge_fleet_records({h});
  auto r = time_to_lease_again(m, {{1000.0, 7.0, 1.0}, {1000.0, 8.0, 1.0}}, 1000.0, 9000.0);
  EXPECT_EQ(r["n"], 1);
  EXPECT_EQ(r["not_leased_again"], 1);
  EXPECT_NEAR(r["p50_s"].get<double>(), 2.5, 1e-9);
}

}  // namespace
}  // namespace moerl::bench
