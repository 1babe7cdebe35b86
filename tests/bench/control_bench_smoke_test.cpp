// `moerl bench control` on small sizes, so CI runs the control-plane benchmark end to end: a
// coordinator actor in this process and a `moerl node --role coordinator` child, leaser
// processes over CAF's middleman, K=1 and K=batch. The test checks that every part ran and
// granted what it asked for, with provenance and load average; never how fast (speed is the
// benchmark's to report). Issue 28: the bench failed at once on its defaults for weeks, and
// nothing noticed, because no test ran it.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/command_output.h"

#ifndef MOERL_BINARY
#error "MOERL_BINARY must name the moerl binary (tests/bench/CMakeLists.txt)"
#endif

namespace {

using nlohmann::json;

using moerl::testing::command_output;

// Every round-trip run of `runs` granted a unit per request (K units for the batch run).
void expect_round_trips(const json& runs, int requests, uint32_t batch, const char* where) {
  ASSERT_EQ(runs.size(), 2u) << where << ": " << runs.dump();
  EXPECT_EQ(runs[0]["k"], 1) << where;
  EXPECT_EQ(runs[1]["k"], batch) << where;
  for (const auto& r : runs) {
    EXPECT_FALSE(r.contains("first_refusal")) << where << ": " << r.dump();
    EXPECT_EQ(r["lease_rtt"]["n"], requests) << where << ": " << r.dump();
    EXPECT_GT(r["lease_rtt"]["p50_us"].get<double>(), 0) << where;
    EXPECT_GE(r["lease_rtt"]["p99_us"].get<double>(), r["lease_rtt"]["p50_us"].get<double>());
    EXPECT_EQ(r["units_granted"].get<uint64_t>(), uint64_t(requests) * r["k"].get<uint32_t>())
        << where << ": " << r.dump();
  }
}

TEST(bench_control, ShortFormRunsEveryPartOnTheDefaultConfiguration) {
  constexpr int kRequests = 50, kNodes = 2;
  constexpr uint32_t kBatch = 16;
  int rc = -1;
  // Only the sizes shrink: the coordinator's configuration is the bench's own (the one that
  // broke), so a config check that refuses it fails here.
  const std::string out = command_output(
      std::string(MOERL_BINARY) + " bench control --json --requests " + std::to_string(kRequests) +
          " --nodes " + std::to_string(kNodes) + " --batch " + std::to_string(kBatch) +
          " --duration 0.3 --repeat 1 2>/dev/null",
      &rc);
  ASSERT_EQ(rc, 0) << out;
  const json r = json::parse(out, nullptr, false);
  ASSERT_TRUE(r.is_object()) << out;
  EXPECT_EQ(r["benchmark"], "control");
  EXPECT_FALSE(r.contains("error")) << r["error"].dump();
  EXPECT_TRUE(r["provenance"].contains("commit"));
  EXPECT_EQ(r["load_average_start"].size(), 3u);
  EXPECT_FALSE(r["lease_rtt_in_process"].contains("coordinator_down"))
      << r["lease_rtt_in_process"]["coordinator_down"];

  expect_round_trips(r["lease_rtt_in_process"]["runs"], kRequests, kBatch, "in-process");
  expect_round_trips(r["lease_rtt_cross_process"]["runs"], kRequests, kBatch, "cross-process");

  // Both K ran their leaser processes, each of which reported units it was granted.
  ASSERT_EQ(r["leased_units_per_s"].size(), 2u) << r.dump();
  for (const auto& k : r["leased_units_per_s"]) {
    EXPECT_GT(k["units_per_s"].get<double>(), 0) << k.dump();
    ASSERT_EQ(k["runs"].size(), 1u) << k.dump();
    EXPECT_EQ(k["runs"][0]["processes_reporting"], kNodes) << k.dump();
    EXPECT_GT(k["runs"][0]["units"].get<uint64_t>(), 0u) << k.dump();
  }
}

TEST(bench_control, AnOutOfRangeSizeIsRefusedByName) {
  int rc = -1;
  const std::string out =
      command_output(std::string(MOERL_BINARY) + " bench control --requests 0 --json 2>&1", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--requests"), std::string::npos) << out;
}

}  // namespace
