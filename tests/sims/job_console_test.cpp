// The runner's parsing of console replies and command lines: a malformed `nodes` reply is an
// error naming the entry, --against addresses are checked, and a replacement's command line
// differs from its original only in the node name.
#include <gtest/gtest.h>

#include "sims/job_console.h"
#include "sims/runner.h"

namespace moerl::sims {
namespace {

TEST(job_console, nodes_reply_is_parsed_and_malformed_entries_are_refused) {
  const auto body = nlohmann::json::parse(R"([
    {"id": "ab12", "name": "rollout-0", "role": "rollout", "pid": 4242, "state": "running",
     "restarts": 1, "leases": 2, "stats": {"x": 1}},
    {"name": "buffer-0", "role": "buffer", "state": "dead"}])");
  auto nodes = parse_nodes(body);
  ASSERT_TRUE(nodes.ok()) << nodes.err().to_string();
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[0].pid, 4242);
  EXPECT_EQ((*nodes)[0].restarts, 1u);
  EXPECT_EQ((*nodes)[0].leases, 2u);
  EXPECT_EQ((*nodes)[0].stats["x"], 1);
  EXPECT_EQ((*nodes)[1].pid, 0);  // absent: never signalled
  EXPECT_EQ((*nodes)[1].state, "dead");

  auto bad =
      parse_nodes(nlohmann::json::parse(R"([{"name": "x", "role": 3, "state": "running"}])"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.err().code, errc::malformed_message);
  EXPECT_NE(bad.err().message.find("\"role\":3"), std::string::npos) << bad.err().message;
  EXPECT_FALSE(parse_nodes(nlohmann::json::object()).ok());
}

TEST(job_console, against_address_must_be_host_and_port) {
  EXPECT_EQ(*console_address_of("127.0.0.1:7411"), "tcp://127.0.0.1:7411");
  EXPECT_EQ(*console_address_of("tcp://10.0.0.5:7411"), "tcp://10.0.0.5:7411");
  for (const char* bad : {"127.0.0.1", ":7411", "host:", "host:0", "host:70000", "host:12ab"}) {
    auto r = console_address_of(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.err().code, errc::invalid_argument);
  }
}

TEST(job_console, replacement_command_line_changes_only_the_node_name) {
  const std::vector<std::string> argv = {"/bin/moerl", "node",
                                         "--role",     "rollout",
                                         "--join",     "127.0.0.1:4000",
                                         "--set",      "node.name=rollout-1",
                                         "--set",      "ledger.lease_timeout_ms=3000"};
  auto out = detail::with_node_name(argv, "rollout-1-r1");
  std::vector<std::string> want = argv;
  want[7] = "node.name=rollout-1-r1";
  EXPECT_EQ(out, want);
  // A node started without a name gets one appended.
  auto unnamed = detail::with_node_name({"/bin/moerl", "node", "--role", "buffer"}, "buffer-0-r1");
  EXPECT_EQ(unnamed, (std::vector<std::string>{"/bin/moerl", "node", "--role", "buffer", "--set",
                                               "node.name=buffer-0-r1"}));
}

}  // namespace
}  // namespace moerl::sims
