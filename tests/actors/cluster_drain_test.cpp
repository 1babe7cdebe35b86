// Interruptions with notice: SIGTERM (kubelet drain), an IMDS spot notice from a local HTTP
// server, and a console injection. The node drains (finishes what fits, returns the rest),
// deregisters and exits 0; the run still ends with clean books.
#include <csignal>
#include <ctime>

#include "tests/actors/cluster_fixture.h"
#include "tests/actors/fake_imds.h"

using namespace moerl::test;

namespace {
std::string iso_utc(int64_t unix_s) {
  std::time_t t = unix_s;
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}
}  // namespace

TEST_F(cluster_test, sigterm_drains_the_node_finishes_its_unit_and_exits_zero) {
  // Long units (4 groups x 8 samples x 4000 rounds) so that the signal lands mid-unit.
  start({"actors.work_rounds=4000", "actors.groups_per_unit=4"});
  wait_leases("rollout-0");
  ASSERT_TRUE(c_->signal("rollout-0", SIGTERM));
  int st = c_->wait_exit("rollout-0", 20000);
  ASSERT_TRUE(WIFEXITED(st)) << st;
  EXPECT_EQ(exit_status(st), 0);
  auto report = wait_done();
  expect_clean_books(report);
  auto i = interruption_of(report, "rollout-0");
  EXPECT_EQ(i.value("source", ""), "sigterm") << report["interruptions"].dump();
  // It held a lease when the signal came and had 7.5 s: the unit fits and is finished.
  EXPECT_GE(i.value("units_finished", 0u), 1u) << i.dump();
  EXPECT_EQ(i.value("units_returned", 9u), 0u) << i.dump();
  EXPECT_EQ(node_of(report, "rollout-0").value("state", ""), "drained");  // see node_of
}

TEST_F(cluster_test, imds_spot_notice_from_a_local_server_drains_the_node) {
  fake_imds imds;
  auto nodes = moerl::up::default_cluster_nodes();
  for (auto& n : nodes)
    if (n.name == "rollout-1")
      n.overrides = {"imds.enabled=true", "imds.endpoint=" + imds.endpoint(),
                     "imds.poll_interval_ms=100"};
  start({}, nodes);
  wait_leases("rollout-1");
  int64_t deadline_s = std::time(nullptr) + 20;
  imds.set_spot("terminate", iso_utc(deadline_s));
  int st = c_->wait_exit("rollout-1", 20000);
  ASSERT_TRUE(WIFEXITED(st)) << st;
  EXPECT_EQ(exit_status(st), 0);
  auto report = wait_done();
  expect_clean_books(report);
  auto i = interruption_of(report, "rollout-1");
  EXPECT_EQ(i.value("source", ""), "imds_spot") << report["interruptions"].dump();
  EXPECT_EQ(i.value("deadline", 0ull), static_cast<uint64_t>(deadline_s) * 1000);
  EXPECT_GE(imds.token_requests(), 1);
}

TEST_F(cluster_test, console_inject_spot_with_a_short_deadline_returns_what_does_not_fit) {
  start({"actors.work_rounds=4000", "actors.groups_per_unit=4"});
  wait_leases("rollout-1");
  auto r = c_->console("inject", {"spot", "rollout-1"}, {{"deadline", "0.2"}});
  ASSERT_TRUE(r) << r.err().to_string();
  int st = c_->wait_exit("rollout-1", 20000);
  ASSERT_TRUE(WIFEXITED(st)) << st;
  EXPECT_EQ(exit_status(st), 0);
  auto report = wait_done(60000);
  expect_clean_books(report);
  auto i = interruption_of(report, "rollout-1");
  EXPECT_EQ(i.value("source", ""), "simulation") << report["interruptions"].dump();
  auto returned = i.value("units_returned", 0u), finished = i.value("units_finished", 0u);
  EXPECT_GE(returned + finished, 1u) << i.dump();
  if (returned > 0) {
    EXPECT_GT(report["accounting"]["dropped"].value("returned", 0u), 0u);
  }
}

TEST_F(cluster_test,
       console_cli_rejects_bad_commands_nodes_and_tokens_and_the_coordinator_keeps_running) {
  start();
  auto run = [&](const std::string& args, std::string* out) { return console_cli(args, out); };
  std::string out;
  int st = run("frobnicate", &out);
  EXPECT_NE(WEXITSTATUS(st), 0);
  EXPECT_NE(out.find("unknown command 'frobnicate'"), std::string::npos) << out;
  st = run("inject spot rollout-42", &out);
  EXPECT_NE(WEXITSTATUS(st), 0);
  EXPECT_NE(out.find("unknown_node"), std::string::npos) << out;
  st = run("status --set console.token=wrong", &out);
  EXPECT_NE(WEXITSTATUS(st), 0);
  EXPECT_NE(out.find("unauthorized"), std::string::npos) << out;
  wait_all_joined();  // all 7 in the list: see wait_all_joined
  st = run("nodes --json", &out);
  EXPECT_EQ(WEXITSTATUS(st), 0) << out;
  auto nodes = json::parse(out, nullptr, false);
  ASSERT_TRUE(nodes.is_array()) << out;
  EXPECT_EQ(nodes.size(), 7u);
  for (auto& n : nodes)
    for (auto* k : {"id", "role", "pid", "state", "restarts", "leases"})
      EXPECT_TRUE(n.contains(k)) << n.dump();
  expect_clean_books(wait_done());
}
