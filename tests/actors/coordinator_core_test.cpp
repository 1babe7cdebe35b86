// The coordinator's decisions, deterministically: a manual clock, an in-memory ledger, and
// every input injected as the message a node would send.
#include <gtest/gtest.h>

#include <csignal>

#include "actors/coordinator_core.h"
#include "actors/ledger/clock.h"

using namespace moerl;
using namespace moerl::actors;
using nlohmann::json;

namespace {

std::string hex_id(char c) { return std::string(32, c); }

messages::heartbeat hb(const std::string& id, const std::string& role, const std::string& name,
                       const std::string& endpoint = "") {
  messages::heartbeat h;
  h.node = id;
  h.role = role;
  h.name = name;
  h.pid = 100;
  h.state = "running";
  h.endpoint = endpoint;
  return h;
}

struct core_fixture : ::testing::Test {
  ledger::manual_clock clock{1000};
  std::unique_ptr<coordinator_core> core;
  const std::string rollout = hex_id('a'), shard = hex_id('b'), trainer = hex_id('c');

  void SetUp() override {
    ledger::ledger_options lo;
    lo.lease_timeout_ms = 1000;
    lo.group_size = 2;
    auto led = ledger::work_ledger::open(lo, clock, nullptr);
    ASSERT_TRUE(led) << led.err().to_string();
    coordinator_options o;
    o.iterations = 2;
    o.units_per_iteration = 2;
    o.groups_per_unit = 2;
    o.heartbeat_timeout_ms = 5000;
    o.console_token = "t0k";
    core = std::make_unique<coordinator_core>(o, std::move(*led), clock);
    ASSERT_TRUE(core->register_node(hb(rollout, "rollout", "rollout-0")));
    ASSERT_TRUE(core->register_node(hb(shard, "buffer", "buffer-0", "tcp://127.0.0.1:1")));
    ASSERT_TRUE(core->register_node(hb(trainer, "trainer", "trainer-0")));
    core->take_outbound();
  }
  messages::lease lease(const std::string& worker) {
    messages::lease_request r;
    r.worker = worker;
    auto bytes = core->lease(r);
    auto l = messages::decode<messages::lease>(bytes);
    EXPECT_TRUE(l) << "not a lease";
    return l ? *l : messages::lease{};
  }
  std::optional<moerl::error> as_error(const std::string& bytes) {
    if (bytes.empty()) return std::nullopt;
    auto e = messages::decode<messages::wire_error>(bytes);
    if (!e) return std::nullopt;
    return e->value;
  }
  messages::admin_request admin(const std::string& cmd, std::vector<std::string> args = {}) {
    messages::admin_request r;
    r.token = "t0k";
    r.command = cmd;
    r.args = std::move(args);
    return r;
  }
  void commit(const messages::lease& l) {
    messages::unit_report rep;
    rep.unit_id = l.unit.id;
    rep.attempt = l.attempt;
    rep.worker = l.worker;
    rep.samples_produced = static_cast<uint32_t>(l.unit.group_ids.size() * l.unit.samples_per_group);
    ASSERT_EQ(core->report(rep), "");
    ledger::shard_ack ack{l.unit.id, l.attempt, l.shard, l.unit.group_ids, {}};
    ASSERT_TRUE(core->shard_ack(ack));
  }
};

}  // namespace

TEST_F(core_fixture, lease_names_the_shard_endpoint_and_commit_then_consumption_balance_the_books) {
  auto l = lease(rollout + "/0");
  EXPECT_EQ(l.shard, "buffer-0");
  EXPECT_EQ(l.shard_endpoint, "tcp://127.0.0.1:1");
  EXPECT_EQ(l.unit.group_ids.size(), 2u);
  // The shard heard of the attempt before the worker got its lease.
  auto out = core->take_outbound();
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out[0].what, outbound::kind::shard_event);
  EXPECT_EQ(out[0].node, shard);
  commit(l);
  auto v = core->ledger().find(l.unit.id);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->state, ledger::unit_state::committed);
  for (auto g : l.unit.group_ids) ASSERT_TRUE(core->consumed({l.unit.id, l.attempt, g, 2}));
  auto a = core->ledger().counters();
  EXPECT_EQ(a.dispatched, 4u);
  EXPECT_EQ(a.committed, 4u);
  EXPECT_EQ(a.trained, 4u);
  EXPECT_TRUE(core->ledger().check_invariant());
  // Handing the same group to a trainer twice is refused and counted.
  EXPECT_FALSE(core->consumed({l.unit.id, l.attempt, l.unit.group_ids[0], 2}));
}

TEST_F(core_fixture, expired_lease_fences_the_old_attempt) {
  auto l1 = lease(rollout + "/0");
  clock.advance(1500);
  core->tick();
  auto l2 = lease(rollout + "/1");
  EXPECT_EQ(l2.unit.id, l1.unit.id == 1 ? 2u : l2.unit.id);  // oldest pending first
  messages::unit_report late;
  late.unit_id = l1.unit.id;
  late.attempt = l1.attempt;
  late.worker = l1.worker;
  late.samples_produced = 4;
  auto err = as_error(core->report(late));
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code, errc::stale_attempt);
  EXPECT_EQ(core->ledger().counters().dropped.at("lease_expired"), 4u);
  EXPECT_TRUE(core->ledger().check_invariant());
}

TEST_F(core_fixture, dead_rollout_node_expires_its_leases_and_leaves_the_trainer_alone) {
  auto l = lease(rollout + "/0");
  core->take_outbound();
  core->node_down(rollout, "test: SIGKILL");
  auto v = core->ledger().find(l.unit.id);
  EXPECT_EQ(v->state, ledger::unit_state::pending);
  EXPECT_EQ(core->ledger().counters().dropped.at("worker_dead"), 4u);
  for (auto& o : core->take_outbound()) EXPECT_NE(o.node, trainer) << "the trainer group was touched";
  EXPECT_EQ(core->nodes().at(trainer).state, "running");
  // A dead node cannot lease any more.
  auto err = as_error(core->lease(messages::lease_request{rollout + "/0", 1, 0}));
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code, errc::unknown_node);
}

TEST_F(core_fixture, lost_shard_reopens_units_whose_samples_no_trainer_received) {
  auto l = lease(rollout + "/0");
  commit(l);
  core->node_down(shard, "test: shard killed");
  auto v = core->ledger().find(l.unit.id);
  EXPECT_EQ(v->state, ledger::unit_state::pending);
  EXPECT_EQ(core->ledger().counters().dropped.at("shard_lost"), 4u);
  EXPECT_EQ(core->ledger().counters().lost, 0u);
  EXPECT_TRUE(core->ledger().check_invariant());
}

TEST_F(core_fixture, heartbeat_silence_declares_a_node_dead) {
  lease(rollout + "/0");
  clock.advance(4000);
  ASSERT_TRUE(core->heartbeat(hb(shard, "buffer", "buffer-0", "tcp://127.0.0.1:1")));
  ASSERT_TRUE(core->heartbeat(hb(trainer, "trainer", "trainer-0")));
  clock.advance(2000);
  core->tick();
  EXPECT_EQ(core->nodes().at(rollout).state, "dead");
  EXPECT_NE(core->nodes().at(rollout).down_reason.find("no heartbeat"), std::string::npos);
  EXPECT_EQ(core->nodes().at(trainer).state, "running");
}

TEST_F(core_fixture, admin_errors_name_the_problem_and_inject_targets_one_node) {
  auto bad = admin("status");
  bad.token = "nope";
  auto r = core->admin(bad);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.err.code, errc::unauthorized);
  r = core->admin(admin("explode"));
  EXPECT_EQ(r.err.code, errc::unknown_command);
  EXPECT_NE(r.err.message.find("explode"), std::string::npos);
  r = core->admin(admin("inject", {"spot", "rollout-9"}));
  EXPECT_EQ(r.err.code, errc::unknown_node);
  r = core->admin(admin("inject", {"meteor", "rollout-0"}));
  EXPECT_EQ(r.err.code, errc::unknown_command);
  auto req = admin("inject", {"spot", "rollout-0"});
  req.options = {{"deadline", "abc"}};
  EXPECT_EQ(core->admin(req).err.code, errc::invalid_argument);
  core->take_outbound();
  req.options = {{"deadline", "7"}};
  r = core->admin(req);
  ASSERT_TRUE(r.ok) << r.err.to_string();
  auto out = core->take_outbound();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].what, outbound::kind::notice);
  EXPECT_EQ(out[0].node, rollout);
  r = core->admin(admin("inject", {"kill", "trainer-0"}));
  ASSERT_TRUE(r.ok);
  out = core->take_outbound();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].signal, SIGKILL);
  // Status and nodes stay answerable after bad input.
  r = core->admin(admin("nodes"));
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(json::parse(r.body_json).size(), 3u);
}

TEST_F(core_fixture, registration_refuses_bad_ids_roles_and_shards_without_endpoint) {
  EXPECT_EQ(core->register_node(hb("xyz", "rollout", "r")).err().code, errc::invalid_argument);
  EXPECT_EQ(core->register_node(hb(hex_id('d'), "wizard", "w")).err().code, errc::invalid_argument);
  EXPECT_EQ(core->register_node(hb(hex_id('e'), "buffer", "b2")).err().code, errc::invalid_argument);
}

TEST_F(core_fixture, run_is_done_when_every_iteration_is_committed_and_trained) {
  EXPECT_FALSE(core->done());
  for (int i = 0; i < 4; ++i) {
    core->tick();
    auto l = lease(rollout + "/0");
    commit(l);
    for (auto g : l.unit.group_ids) ASSERT_TRUE(core->consumed({l.unit.id, l.attempt, g, 2}));
    core->policy_version(core->current_policy_version() + (i % 2), "");
  }
  core->tick();
  EXPECT_TRUE(core->done()) << core->status_json().dump();
  EXPECT_EQ(core->ledger().counters().trained, 16u);
}
