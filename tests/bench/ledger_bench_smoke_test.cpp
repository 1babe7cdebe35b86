// `moerl bench ledger` on small sizes, so CI runs it end to end: the in-memory cycle, the
// journaled cycle with one object per sync and with appends (with and without fsync), the
// sample plane and the coordinator's tick queries. Structure only: that every part ran and
// reports what it measured; never how fast (the benchmark's to report).
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/command_output.h"

#ifndef MOERL_BINARY
#error "MOERL_BINARY must name the moerl binary (tests/bench/CMakeLists.txt)"
#endif

namespace {

using moerl::testing::command_output;
using nlohmann::json;

TEST(bench_ledger, ShortFormRunsEveryPart) {
  int rc = -1;
  const std::string out = command_output(
      std::string(MOERL_BINARY) +
          " bench ledger --json --units 200 --journaled-units 20 --samples 256 --runs 1"
          " --tick-units 300 2>/dev/null",
      &rc);
  ASSERT_EQ(rc, 0) << out;
  const json r = json::parse(out, nullptr, false);
  ASSERT_TRUE(r.is_object()) << out;
  EXPECT_TRUE(r.contains("provenance"));
  EXPECT_GT(r["lease_cycle_in_memory"]["units_per_s"]["median"].get<double>(), 0);
  for (const char* part : {"lease_cycle_journaled_nofsync_objects", "lease_cycle_journaled_nofsync",
                           "lease_cycle_journaled_fsync_objects", "lease_cycle_journaled_fsync"}) {
    SCOPED_TRACE(part);
    ASSERT_TRUE(r.contains(part)) << out;
    EXPECT_EQ(r[part]["units"], 20);
    EXPECT_GT(r[part]["units_per_s"]["median"].get<double>(), 0);
    // Recovery replays what the cycle journaled: the same records whichever way it was written.
    EXPECT_GT(r[part]["recovery_records_replayed"].get<uint64_t>(), 0u);
  }
  EXPECT_EQ(r["lease_cycle_journaled_fsync"]["recovery_records_replayed"],
            r["lease_cycle_journaled_fsync_objects"]["recovery_records_replayed"]);
  ASSERT_EQ(r["coordinator_tick"].size(), 1u) << out;
  EXPECT_EQ(r["coordinator_tick"][0]["units"], 300);
  EXPECT_EQ(r["coordinator_tick"][0]["open_leases"], 64);
  EXPECT_GT(r["sample_plane"]["samples_per_s"]["median"].get<double>(), 0);
}

TEST(bench_ledger, BadSizesAreRefusedWithTheOptionNamed) {
  int rc = -1;
  const std::string out =
      command_output(std::string(MOERL_BINARY) + " bench ledger --tick-units 0 2>&1", &rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("--tick-units"), std::string::npos) << out;
}

}  // namespace
