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
  if (!std::filesystem::exists(dir + "/" + ca + ".pem"))
    ASSERT_EQ(std::system((q + "openssl req -x509 -newkey rsa:2048 -nodes -keyout " + ca + ".key -out " + ca +
                           ".pem -days 1 -subj /CN=" + ca + " >/dev/null 2>&1").c_str()), 0);
  ASSERT_EQ(std::system((q + "openssl req -newkey rsa:2048 -nodes -keyout " + name + ".key -out " + name +
                         ".csr -subj /CN=" + name + " >/dev/null 2>&1 && openssl x509 -req -in " + name +
                         ".csr -CA " + ca + ".pem -CAkey " + ca + ".key -CAcreateserial -out " + name +
                         ".pem -days 1 >/dev/null 2>&1").c_str()), 0);
}
}  // namespace

TEST_F(cluster_test, tls_cluster_runs_to_the_end_and_a_node_from_another_ca_cannot_join) {
  std::string pki = dir_ + "/pki";
  std::filesystem::create_directories(pki);
  make_cert(pki, "cluster-ca", "node");
  make_cert(pki, "rogue-ca", "rogue");
  auto nodes = moerl::actors::default_cluster_nodes();
  nodes.push_back({"rollout", "rollout-rogue",
                   {"node.tls_certificate=" + pki + "/rogue.pem", "node.tls_key=" + pki + "/rogue.key",
                    "node.tls_ca=" + pki + "/rogue-ca.pem"}});
  start({"node.tls=true", "node.tls_certificate=" + pki + "/node.pem", "node.tls_key=" + pki + "/node.key",
         "node.tls_ca=" + pki + "/cluster-ca.pem"},
        nodes);
  int st = c_->wait_exit("rollout-rogue", 30000);
  ASSERT_TRUE(WIFEXITED(st)) << st;
  EXPECT_EQ(exit_status(st), 3);
  auto report = wait_done(60000);
  expect_clean_books(report);
  EXPECT_EQ(report["nodes"].size(), 7u);  // the rogue node never registered
}
