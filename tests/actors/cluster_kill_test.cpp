// A node that dies without notice: its leases expire back to pending and nothing is lost.
#include <csignal>

#include "tests/actors/cluster_fixture.h"

using namespace moerl::test;

TEST_F(cluster_test, sigkill_of_a_rollout_node_mid_unit_loses_nothing) {
  // Long units (4 groups x 8 samples x 4000 rounds), so that the lease the coordinator lists is
  // still held when the kill lands, and 8 iterations, so that the job outlasts the 2 s re-join
  // grace after it. With the base's short units and 4 iterations a kill once hit rollout-0 just
  // after its unit was committed, holding nothing, and the job (1.3 s) ended inside the grace:
  // rollout-0 still "unreachable", nothing dropped (load 20). A held lease keeps the job from
  // ending until rollout-0 is declared dead (worker_dead) or the lease expires.
  start({"actors.iterations=8", "actors.work_rounds=4000", "actors.groups_per_unit=4"});
  ASSERT_NO_FATAL_FAILURE(wait_leases("rollout-0"));
  ASSERT_TRUE(c_->signal("rollout-0", SIGKILL));
  int st = c_->wait_exit("rollout-0", 5000);
  ASSERT_TRUE(WIFSIGNALED(st));
  auto report = wait_done(60000);  // the long-unit tests' bound (cluster_drain_test)
  expect_clean_books(report);
  auto dropped = report["accounting"]["dropped"];
  EXPECT_GT(dropped.value("worker_dead", 0u) + dropped.value("lease_expired", 0u), 0u)
      << dropped.dump();
  // From the report fetched at done (node_of): a console call now may find the run over.
  EXPECT_EQ(node_of(report, "rollout-0").value("state", ""), "dead");
  EXPECT_EQ(node_of(report, "trainer-0").value("restarts", 1u),
            0u);  // a vanished rollout does not touch the trainer
}

TEST_F(cluster_test, console_kill_injection_is_a_death_without_notice) {
  start();
  wait_leases("rollout-1");
  auto r = c_->console("inject", {"kill", "rollout-1"});
  ASSERT_TRUE(r) << r.err().to_string();
  int st = c_->wait_exit("rollout-1", 5000);
  ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  auto report = wait_done();
  expect_clean_books(report);
  bool recorded = false;
  for (auto& i : report["interruptions"])
    recorded |= i.value("node", "") == "rollout-1" && i.value("source", "") == "kill";
  EXPECT_TRUE(recorded) << report["interruptions"].dump();
}
