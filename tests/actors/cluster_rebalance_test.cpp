// `moerl console inject rebalance NODE`, end to end through the CLI: the node gets the same
// notice an IMDS rebalance recommendation gives, shows as draining (at risk, taking no new
// leases), finishes what it holds, deregisters and exits 0; a Spot notice that follows brings
// the deadline forward. Bad targets get a clear error and a non-zero exit.
#include "tests/actors/cluster_fixture.h"

using namespace moerl::test;

struct rebalance_cluster_test : cluster_test {
  // The node exits 0 after its drain, the run ends with clean books; its interruption entry.
  json drained_entry(const std::string& name) {
    int st = c_->wait_exit(name, 30000);
    EXPECT_TRUE(WIFEXITED(st)) << st;
    EXPECT_EQ(exit_status(st), 0);
    auto report = wait_done(60000);
    expect_clean_books(report);
    EXPECT_EQ(node_of(report, name).value("state", ""), "drained");  // see node_of
    auto i = interruption_of(report, name);
    EXPECT_EQ(i.value("source", ""), "imds_rebalance") << report["interruptions"].dump();
    return i;
  }
};

TEST_F(rebalance_cluster_test, cli_rebalance_drains_the_node_and_refuses_bad_targets) {
  // Long units (4 groups x 8 samples x 4000 rounds) so the recommendation lands mid-unit.
  // The recommendation first, while the short job (4 iterations, ~2 s) still runs: the bad
  // targets' three CLI calls before it once took 3 s at load 59, the job had ended, and
  // rollout-1 never held a lease again. The bad targets come after the drain (the
  // coordinator serves them as well then).
  start({"actors.work_rounds=4000", "actors.groups_per_unit=4"});
  std::string out;
  ASSERT_NO_FATAL_FAILURE(wait_leases("rollout-1"));
  ASSERT_EQ(WEXITSTATUS(console_cli("inject rebalance rollout-1 --json", &out)), 0) << out;
  auto reply = json::parse(out, nullptr, false);
  ASSERT_TRUE(reply.is_object()) << out;
  EXPECT_EQ(reply.value("action", ""), "rebalance");
  auto i = drained_entry("rollout-1");
  EXPECT_NE(i.value("reason", "").find("console inject rebalance"), std::string::npos) << i.dump();
  // The default grace (imds.rebalance_grace_ms, 120 s) leaves room for whatever unit it still
  // held when the recommendation came (the CLI's start can outlast a unit): nothing returned.
  EXPECT_EQ(i.value("units_returned", 9u), 0u) << i.dump();
  EXPECT_GE(i.value("deadline", 0ull), i.value("at", 0ull) + 100000) << i.dump();

  EXPECT_NE(WEXITSTATUS(console_cli("inject rebalance rollout-42", &out)), 0);
  EXPECT_NE(out.find("unknown_node"), std::string::npos) << out;
  EXPECT_NE(out.find("rollout-42"), std::string::npos) << out;
  EXPECT_NE(WEXITSTATUS(console_cli("inject rebalance coordinator", &out)), 0);
  EXPECT_NE(out.find("no node 'coordinator'"), std::string::npos) << out;
  EXPECT_NE(WEXITSTATUS(console_cli("inject rebalance", &out)), 0);
  EXPECT_NE(out.find("needs a NODE"), std::string::npos) << out;
  // The coordinator kept running through the bad input.
  EXPECT_EQ(WEXITSTATUS(console_cli("status", &out)), 0) << out;
}

TEST_F(rebalance_cluster_test, a_spot_notice_after_the_recommendation_brings_the_deadline_forward) {
  start({"actors.work_rounds=4000", "actors.groups_per_unit=4"});
  wait_leases("rollout-0");
  auto r = c_->console("inject", {"rebalance", "rollout-0"});
  ASSERT_TRUE(r) << r.err().to_string();
  // The node holds a unit that takes seconds: it is still draining when the notice comes.
  auto spot = c_->console("inject", {"spot", "rollout-0"}, {{"deadline", "0.2"}});
  ASSERT_TRUE(spot) << spot.err().to_string();
  const uint64_t spot_deadline = (*spot).value("deadline_unix_ms", 0ull);
  ASSERT_GT(spot_deadline, 0u);
  auto i = drained_entry("rollout-0");
  EXPECT_NE(i.value("reason", "").find("then console inject spot"), std::string::npos) << i.dump();
  // The drain kept the earlier deadline: the notice's.
  EXPECT_EQ(i.value("deadline", 0ull), spot_deadline) << i.dump();
}
