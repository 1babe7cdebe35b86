// The control plane over TLS (caf_openssl), on loopback, with a CA and certificates the test
// makes with the openssl CLI: a cluster whose nodes hold certificates from the cluster CA
// runs to the end; a node with a certificate from another CA cannot join and exits 3.
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
}  // namespace

TEST_F(cluster_test, tls_cluster_runs_to_the_end_with_clean_books) {
  std::string pki = dir_ + "/pki";
  std::filesystem::create_directories(pki);
  make_cert(pki, "cluster-ca", "node");
  start({"node.tls=true", "node.tls_certificate=" + pki + "/node.pem",
         "node.tls_key=" + pki + "/node.key", "node.tls_ca=" + pki + "/cluster-ca.pem"});
  auto report = wait_done(60000);
  expect_clean_books(report);
  EXPECT_EQ(report["nodes"].size(), 7u);
}

// The books are not checked here: while a node from another CA keeps retrying its TLS
// handshake, the coordinator's requests have been seen to time out (CAF 0.17's openssl
// handshakes run on the middleman's I/O thread), live nodes are then declared dead and the
// ledger counts duplicates. That is a known open problem of CAF 0.17's TLS transport, not
// hidden: this test checks only that the foreign node is refused and never registers.
TEST_F(cluster_test, a_node_with_a_certificate_from_another_ca_cannot_join) {
  std::string pki = dir_ + "/pki";
  std::filesystem::create_directories(pki);
  make_cert(pki, "cluster-ca", "node");
  make_cert(pki, "rogue-ca", "rogue");
  auto nodes = moerl::actors::default_cluster_nodes();
  nodes.push_back({"rollout",
                   "rollout-rogue",
                   {"node.tls_certificate=" + pki + "/rogue.pem",
                    "node.tls_key=" + pki + "/rogue.key", "node.tls_ca=" + pki + "/rogue-ca.pem"}});
  start({"node.tls=true", "node.tls_certificate=" + pki + "/node.pem",
         "node.tls_key=" + pki + "/node.key", "node.tls_ca=" + pki + "/cluster-ca.pem"},
        nodes);
  int st = c_->wait_exit("rollout-rogue", 30000);
  ASSERT_TRUE(WIFEXITED(st)) << st;
  EXPECT_EQ(exit_status(st), 3);
  auto nodes_view = c_->console("nodes");
  ASSERT_TRUE(nodes_view) << nodes_view.err().to_string();
  for (const auto& n : *nodes_view) EXPECT_NE(n.value("name", ""), "rollout-rogue");
}
