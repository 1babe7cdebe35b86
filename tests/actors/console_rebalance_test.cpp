// `moerl console inject rebalance NODE`: the coordinator turns it into the same
// interruption_notice the IMDS poller makes for a rebalance recommendation, with the
// imds.rebalance_grace_ms deadline; bad targets are refused with a clear error. Deterministic:
// a manual clock, an in-memory ledger, the admin request injected directly.
#include <gtest/gtest.h>

#include "actors/coordinator_core.h"
#include "actors/interruption.h"
#include "ledger/clock.h"
#include "tests/actors/core_harness.h"

using namespace moerl;
using namespace moerl::actors;

namespace {

using moerl::test::member;

struct rebalance_fixture : ::testing::Test {
  ledger::manual_clock clock{1000};
  std::unique_ptr<coordinator_core> core;
  const std::string rollout = std::string(32, 'a'), shard = std::string(32, 'b');
  static constexpr int64_t kGraceMs = 90000;

  void SetUp() override {
    ledger::ledger_options lo;
    lo.lease_timeout_ms = 1000;
    lo.group_size = 2;
    coordinator_options o;
    o.console_token = "t0k";
    o.rebalance_grace_ms = kGraceMs;
    core = moerl::test::make_core(clock, o, lo,
                                  {member(rollout, "rollout", "rollout-0"),
                                   member(shard, "buffer", "buffer-0", "tcp://127.0.0.1:1")});
    ASSERT_TRUE(core);
  }
  messages::admin_reply inject(std::vector<std::string> args, std::string deadline = "") {
    messages::admin_request r;
    r.token = "t0k";
    r.command = "inject";
    r.args = std::move(args);
    if (!deadline.empty()) r.options = {{"deadline", deadline}};
    return core->admin(r);
  }
};

TEST_F(rebalance_fixture, becomes_the_imds_rebalance_notice_with_the_configured_grace) {
  const int64_t before = unix_now_ms();
  auto r = inject({"rebalance", "rollout-0"});
  ASSERT_TRUE(r.ok) << r.err.to_string();
  auto out = core->take_outbound();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].what, outbound::kind::notice);
  EXPECT_EQ(out[0].node, rollout);
  const auto& n = out[0].notice;
  EXPECT_EQ(n.source, messages::interruption_source::imds_rebalance);
  EXPECT_NE(n.reason.find("console inject rebalance"), std::string::npos) << n.reason;
  EXPECT_GE(static_cast<int64_t>(n.deadline_unix_ms), before + kGraceMs);
  EXPECT_LE(static_cast<int64_t>(n.deadline_unix_ms), unix_now_ms() + kGraceMs);
  EXPECT_NE(r.body_json.find("\"action\":\"rebalance\""), std::string::npos) << r.body_json;
}

TEST_F(rebalance_fixture, an_explicit_deadline_wins) {
  const int64_t before = unix_now_ms();
  ASSERT_TRUE(inject({"rebalance", "buffer-0"}, "5").ok);
  auto out = core->take_outbound();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_GE(static_cast<int64_t>(out[0].notice.deadline_unix_ms), before + 5000);
  EXPECT_LT(static_cast<int64_t>(out[0].notice.deadline_unix_ms), before + kGraceMs);
}

TEST_F(rebalance_fixture, unknown_nodes_and_the_coordinator_are_refused_by_name) {
  auto r = inject({"rebalance", "rollout-7"});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.err.code, errc::unknown_node);
  EXPECT_NE(r.err.message.find("rollout-7"), std::string::npos);
  // The coordinator is not a member node: nothing to drain, and it says so by name.
  r = inject({"rebalance", "coordinator"});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.err.code, errc::unknown_node);
  EXPECT_NE(r.err.message.find("coordinator"), std::string::npos);
  r = inject({"rebalance"});
  EXPECT_EQ(r.err.code, errc::invalid_argument);
  r = inject({"rebalance", "rollout-0"}, "-3");
  EXPECT_EQ(r.err.code, errc::invalid_argument);
  EXPECT_TRUE(core->take_outbound().empty());
}

TEST_F(rebalance_fixture, a_draining_node_still_takes_the_spot_notice_that_follows) {
  ASSERT_TRUE(inject({"rebalance", "rollout-0"}).ok);
  auto hb = member(rollout, "rollout", "rollout-0");
  hb.state = "draining";
  ASSERT_TRUE(core->heartbeat(hb));
  core->take_outbound();
  auto r = inject({"spot", "rollout-0"}, "2");
  ASSERT_TRUE(r.ok) << r.err.to_string();
  auto out = core->take_outbound();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].notice.source, messages::interruption_source::simulation);
  // Only notices reach a draining node; kill and sigterm still need a running one.
  r = inject({"kill", "rollout-0"});
  EXPECT_EQ(r.err.code, errc::shutting_down);
}

TEST(console_notice, names_every_kind_and_refuses_the_rest) {
  for (const char* k : {"spot", "rebalance", "drain"}) {
    auto n = console_notice(k, "n1", 1234);
    ASSERT_TRUE(n) << k;
    EXPECT_EQ(n->deadline_unix_ms, 1234u);
    EXPECT_EQ(n->node, "n1");
  }
  EXPECT_EQ(console_notice("kill", "n1", 1).err().code, errc::unknown_command);
}

}  // namespace
