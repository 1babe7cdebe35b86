// The ZeroMQ planes under CURVE across processes: a cluster whose nodes share a plane secret
// runs to the end with clean books (samples, reward hop, weight caches all secured), and a
// node that would listen off loopback without one refuses to start and names the key.
#include <csignal>

#include "common/child_process.h"
#include "tests/actors/cluster_fixture.h"
#include "zmq/plane_keys.h"

using namespace moerl::test;
using namespace moerl;

TEST_F(cluster_test, a_cluster_with_a_plane_secret_runs_every_zmq_plane_encrypted) {
  const std::string secret = dir_ + "/plane.secret";
  ASSERT_TRUE(zmq::write_new_plane_secret(secret));
  // Long enough that the console still serves while the two CLI calls below run.
  start({"node.plane_secret_file=" + secret, "actors.iterations=40"});
  // The admin plane too: `moerl console` without the secret hears nothing and says what to
  // set; with it, it is answered.
  auto console_cli = [&](const std::vector<std::string>& extra) {
    process_spec p{{MOERL_BINARY, "console", "--connect", c_->console_address(), "--set",
                    "console.timeout_ms=2000"},
                   "",
                   {}};
    for (const auto& a : extra) p.argv.push_back(a);
    p.argv.push_back("status");
    const std::string log = dir_ + "/console-cli.log";
    std::filesystem::remove(log);
    auto pid = spawn_process(p, {}, log, process_group::own);
    EXPECT_TRUE(pid) << pid.err().to_string();
    auto st = pid ? moerl::wait_exit(*pid, 30000) : result<int>(error(errc::internal, "no pid"));
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return std::make_pair(st && WIFEXITED(*st) ? WEXITSTATUS(*st) : -1, text);
  };
  auto plain = console_cli({});
  EXPECT_EQ(plain.first, 3) << plain.second;
  EXPECT_NE(plain.second.find("set node.plane_secret_file"), std::string::npos) << plain.second;
  auto secured = console_cli({"--set", "node.plane_secret_file=" + secret});
  EXPECT_EQ(secured.first, 0) << secured.second;
  wait_all_joined();  // all 7 in the report: see wait_all_joined
  auto report = wait_done(60000);
  expect_clean_books(report);
  EXPECT_EQ(report["nodes"].size(), 7u);
  EXPECT_GT(report["accounting"].value("trained", 0u), 0u);
}

TEST(plane_security_start, a_node_off_loopback_without_the_secret_refuses_naming_the_key) {
  char tmpl[] = "/tmp/moerl-plane-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string log = std::string(tmpl) + "/node.log";
  process_spec p{{MOERL_BINARY, "node", "--role", "buffer", "--join", "127.0.0.1:1", "--set",
                  "node.host=0.0.0.0"},
                 "",
                 {}};
  auto pid = spawn_process(p, {}, log, process_group::own);
  ASSERT_TRUE(pid) << pid.err().to_string();
  auto st = moerl::wait_exit(*pid, 30000);
  ASSERT_TRUE(st) << st.err().to_string();
  ASSERT_TRUE(WIFEXITED(*st)) << describe_wait_status(*st);
  EXPECT_EQ(WEXITSTATUS(*st), 2);
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("node.plane_secret_file is not set"), std::string::npos) << text;
  std::filesystem::remove_all(tmpl);
}
