// A node that dies without notice: its leases expire back to pending and nothing is lost.
#include <csignal>

#include "tests/actors/cluster_fixture.h"

using namespace moerl::test;

TEST_F(cluster_test, sigkill_of_a_rollout_node_mid_unit_loses_nothing) {
  start();
  wait_leases("rollout-0");
  ASSERT_TRUE(c_->signal("rollout-0", SIGKILL));
  int st = c_->wait_exit("rollout-0", 5000);
  ASSERT_TRUE(WIFSIGNALED(st));
  auto report = wait_done();
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
