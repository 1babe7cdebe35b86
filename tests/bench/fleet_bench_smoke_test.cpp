// `moerl bench fleet` in its CI form: 200 simulated rollout nodes multiplexed into 2 host
// processes, against a real `moerl node --role coordinator`, 2 buffer shards and a trainer.
// The test checks that every phase ran and that the books balance (lost = duplicated = 0,
// the invariant holds, the trainer trained); never how fast: the figures are the
// benchmark's (bench/control/README.md).
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

TEST(bench_fleet, TwoHundredNodesSurviveAKillAndASpotNoticeWithBalancedBooks) {
  constexpr int kNodes = 200, kVictims = 20;  // --fraction 0.1 of each host's 100
  int rc = -1;
  const std::string out =
      command_output(std::string(MOERL_BINARY) +
                         " bench fleet --json --nodes 200 --hosts 2 --warmup 1"
                         " --measure 3 --fault 6 --tick-cost-units 20000 2>/dev/null",
                     &rc);
  ASSERT_EQ(rc, 0) << out;
  const json r = json::parse(out, nullptr, false);
  ASSERT_TRUE(r.is_object()) << out;
  EXPECT_EQ(r["benchmark"], "fleet");
  EXPECT_TRUE(r["provenance"].contains("commit"));
  EXPECT_EQ(r["hosts_reporting"], 2);

  // Every node registered, the replacements of both phases included, and worked.
  const json& fleet = r["fleet"];
  EXPECT_EQ(fleet["registered"], kNodes + 2 * kVictims) << fleet.dump();
  EXPECT_EQ(fleet["register_failed"], 0) << fleet.dump();
  EXPECT_GT(fleet["heartbeats"].get<uint64_t>(), 0u);
  EXPECT_TRUE(fleet["unit_failures"].empty()) << fleet.dump();
  const json& steady = r["steady"];
  EXPECT_GT(steady["lease_rtt"]["n"].get<uint64_t>(), 0u) << steady.dump();
  EXPECT_GT(steady["units_per_s"].get<double>(), 0) << steady.dump();
  EXPECT_GT(steady["coordinator_cpu_cores"].get<double>(), 0) << steady.dump();
  EXPECT_GT(steady["coordinator_rss_bytes"].get<uint64_t>(), 0u);

  // Killed: the coordinator declared every victim dead within the phase, and every lease
  // they held is accounted for (leased again, or still waiting behind the queue).
  const json& kill = r["kill"];
  EXPECT_EQ(kill["victims"], kVictims) << kill.dump();
  EXPECT_FALSE(kill["all_dead_s"].is_null()) << kill.dump();
  EXPECT_EQ(kill["leased_again"]["n"].get<uint64_t>() +
                kill["leased_again"]["not_leased_again"].get<uint64_t>(),
            kill["leases_held_by_victims"].get<uint64_t>())
      << kill.dump();

  // Noticed: every victim drained and told the coordinator so.
  const json& notice = r["notice"];
  EXPECT_EQ(notice["victims"], kVictims) << notice.dump();
  EXPECT_EQ(notice["drains_recorded"], kVictims) << notice.dump();
  EXPECT_FALSE(notice["all_drained_s"].is_null()) << notice.dump();

  // The tick's scans were timed at the run's ledger size and at the size asked for.
  ASSERT_EQ(r["coordinator_tick_scans"].size(), 2u) << r["coordinator_tick_scans"].dump();
  EXPECT_EQ(r["coordinator_tick_scans"][1]["units"], 20000);
  EXPECT_GT(r["coordinator_tick_scans"][1]["tick_scans_ms"].get<double>(), 0);

  // The books: nothing lost, nothing twice, and the trainer consumed.
  const json& books = r["books"];
  ASSERT_TRUE(books.contains("accounting")) << books.dump();
  EXPECT_EQ(books["accounting"]["lost"], 0) << books.dump();
  EXPECT_EQ(books["accounting"]["duplicated"], 0) << books.dump();
  EXPECT_EQ(books["invariant_ok"], true) << books.dump();
  EXPECT_EQ(books["invariant_violations"], 0) << books.dump();
  EXPECT_GT(books["accounting"]["trained"].get<uint64_t>(), 0u) << books.dump();
}

}  // namespace
