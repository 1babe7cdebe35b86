// The control plane over TLS (caf_openssl behind actors/internal/openssl_error_queue.h), on
// loopback, with a CA and certificates the test makes with the openssl CLI: a cluster whose nodes
// hold certificates from the cluster CA runs to the end; a node with a certificate from another CA
// cannot join and exits 3. One TLS link ending, by a drain, a kill or a refused handshake, leaves
// every other link up: without the error-queue guard, caf_openssl 0.17.6 closed other nodes' links
// to the coordinator one after another (openssl_error_queue.cpp says why).
#include <csignal>
#include <cstdlib>

#include "tests/actors/cluster_fixture.h"

using namespace moerl::test;

namespace {
// Makes <dir>/<name>.key + <name>.pem signed by <ca>.pem/<ca>.key (creating the CA if new).
void make_cert(const std::string& dir, const std::string& ca, const std::string& name) {
  std::string q = "cd '" + dir + "' && ";
  if (!std::filesystem::exists(dir + "/" + ca + ".pem")) {
    ASSERT_EQ(std::system((q + "openssl req -x509 -newkey rsa:2048 -nodes -keyout " + ca +
                           ".key -out " + ca + ".pem -days 1 -subj /CN=" + ca + " >/dev/null 2>&1")
                              .c_str()),
              0);
  }
  ASSERT_EQ(
      std::system((q + "openssl req -newkey rsa:2048 -nodes -keyout " + name + ".key -out " + name +
                   ".csr -subj /CN=" + name + " >/dev/null 2>&1 && openssl x509 -req -in " + name +
                   ".csr -CA " + ca + ".pem -CAkey " + ca + ".key -CAcreateserial -out " + name +
                   ".pem -days 1 >/dev/null 2>&1")
                      .c_str()),
      0);
}

// The lines of <log_dir>/<node>.log that say a node lost its link to the coordinator (the
// node agent's down handler) or that the coordinator lost one (a node went unreachable).
std::vector<std::string> lost_link_lines(const std::string& log_dir, const std::string& node) {
  std::vector<std::string> out;
  std::ifstream in(log_dir + "/" + node + ".log");
  for (std::string line; std::getline(in, line);)
    if (line.find("lost the coordinator") != std::string::npos ||
        line.find(") unreachable: ") != std::string::npos)
      out.push_back(line);
  return out;
}
}  // namespace

class tls_cluster_test : public cluster_test {
 protected:
  void start_tls(const std::vector<std::string>& extra = {},
                 std::vector<moerl::up::node_spec> nodes = moerl::up::default_cluster_nodes()) {
    pki_ = dir_ + "/pki";
    std::filesystem::create_directories(pki_);
    make_cert(pki_, "cluster-ca", "node");
    // Each test asserts that no node lost its link, so CAF's failure detector gets room: at
    // load 30 (2 cores, nice 19) a coordinator starved for more than the fixture's 1 s
    // connection timeout dropped one link in 40 test runs. A link the TLS layer closes (the
    // cascade this file guards against) goes at once, whatever the timeout.
    std::vector<std::string> o = {"node.heartbeat_interval_ms=500",
                                  "node.connection_timeout_ms=5000",
                                  "node.tls=true",
                                  "node.tls_certificate=" + pki_ + "/node.pem",
                                  "node.tls_key=" + pki_ + "/node.key",
                                  "node.tls_ca=" + pki_ + "/cluster-ca.pem"};
    o.insert(o.end(), extra.begin(), extra.end());
    start(o, std::move(nodes));
  }
  // No node other than `gone` lost its link to the coordinator, seen from either end.
  void expect_no_other_link_lost(const std::string& gone) {
    for (const auto& spec : moerl::up::default_cluster_nodes()) {
      if (spec.name == gone) continue;
      auto lines = lost_link_lines(dir_ + "/logs", spec.name);
      EXPECT_TRUE(lines.empty()) << spec.name << " lost its link: " << lines.front();
    }
    for (const auto& line : lost_link_lines(dir_ + "/logs", "coordinator"))
      EXPECT_NE(line.find("node " + gone + " "), std::string::npos)
          << "the coordinator lost another node's link: " << line;
  }
  std::string pki_;
};

// A drain ends the node's process; CAF closes its sockets without a TLS close_notify, so the
// coordinator reads "unexpected eof" on that link (as it does for any Spot drain).
TEST_F(tls_cluster_test, a_drained_node_leaves_every_other_tls_link_up) {
  start_tls({"actors.work_rounds=4000", "actors.groups_per_unit=4"});
  wait_leases("rollout-0");
  ASSERT_TRUE(c_->signal("rollout-0", SIGTERM));
  int st = c_->wait_exit("rollout-0", 20000);
  ASSERT_TRUE(WIFEXITED(st)) << st;
  EXPECT_EQ(exit_status(st), 0);
  expect_clean_books(wait_done(60000));
  expect_no_other_link_lost("rollout-0");
}

TEST_F(tls_cluster_test, a_killed_node_leaves_every_other_tls_link_up) {
  start_tls({"actors.work_rounds=4000", "actors.groups_per_unit=4"});
  wait_leases("rollout-1");
  ASSERT_TRUE(c_->signal("rollout-1", SIGKILL));
  c_->wait_exit("rollout-1", 20000);
  expect_clean_books(wait_done(60000));
  expect_no_other_link_lost("rollout-1");
}

TEST_F(tls_cluster_test, a_cluster_runs_to_the_end_with_clean_books) {
  start_tls();
  wait_all_joined();  // every node joined over TLS, before the job could end without one
  auto report = wait_done(60000);
  expect_clean_books(report);
  EXPECT_EQ(report["nodes"].size(), 7u);
  expect_no_other_link_lost("");
}

// The foreign node retries its handshake until it gives up; every refused handshake fails
// on the coordinator's multiplexer thread, and the members' links stay up through all of
// them, so the run's books are clean too.
TEST_F(tls_cluster_test, a_node_with_a_certificate_from_another_ca_cannot_join) {
  auto nodes = moerl::up::default_cluster_nodes();
  std::filesystem::create_directories(dir_ + "/pki");
  make_cert(dir_ + "/pki", "rogue-ca", "rogue");
  nodes.push_back(
      {"rollout",
       "rollout-rogue",
       {"node.tls_certificate=" + dir_ + "/pki/rogue.pem",
        "node.tls_key=" + dir_ + "/pki/rogue.key", "node.tls_ca=" + dir_ + "/pki/rogue-ca.pem",
        // It gives up joining after 10 x this (10 s), not the members' 50 s.
        "node.connection_timeout_ms=1000"}});
  start_tls({}, nodes);
  int st = c_->wait_exit("rollout-rogue", 30000);
  ASSERT_TRUE(WIFEXITED(st)) << st;
  EXPECT_EQ(exit_status(st), 3);
  auto nodes_view = c_->console("nodes");
  ASSERT_TRUE(nodes_view) << nodes_view.err().to_string();
  for (const auto& n : *nodes_view) EXPECT_NE(n.value("name", ""), "rollout-rogue");
  expect_clean_books(wait_done(60000));
  expect_no_other_link_lost("rollout-rogue");
}
