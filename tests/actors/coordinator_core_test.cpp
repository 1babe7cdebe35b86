// The coordinator's decisions, deterministically: a manual clock, an in-memory ledger, and
// every input injected as the message a node would send.
#include <gtest/gtest.h>

#include <csignal>
#include <set>

#include "actors/coordinator_core.h"
#include "actors/interruption.h"
#include "ledger/clock.h"
#include "tests/actors/core_harness.h"

using namespace moerl;
using namespace moerl::actors;
using moerl::test::as_error;
using moerl::test::hex_id;
using nlohmann::json;

namespace {

// The registration heartbeat of a member node (shorter to read in the tests below).
messages::heartbeat hb(const std::string& id, const std::string& role, const std::string& name,
                       const std::string& endpoint = "") {
  return moerl::test::member(id, role, name, endpoint);
}

struct core_fixture : ::testing::Test {
  ledger::manual_clock clock{1000};
  std::unique_ptr<coordinator_core> core;
  const std::string rollout = hex_id('a'), shard = hex_id('b'), trainer = hex_id('c');
  uint32_t iterations = 2;  // of 2 units of 2 groups of 2 samples

  void SetUp() override {
    ledger::ledger_options lo;
    lo.lease_timeout_ms = 1000;
    lo.group_size = 2;
    coordinator_options o;
    o.iterations = iterations;
    o.units_per_iteration = 2;
    o.groups_per_unit = 2;
    o.heartbeat_timeout_ms = 5000;
    o.console_token = "t0k";
    core = moerl::test::make_core(
        clock, o, lo,
        {hb(rollout, "rollout", "rollout-0"), hb(shard, "buffer", "buffer-0", "tcp://127.0.0.1:1"),
         hb(trainer, "trainer", "trainer-0")});
    ASSERT_TRUE(core);
  }
  messages::lease lease(const std::string& worker) {
    messages::lease_request r;
    r.worker = worker;
    auto l = core->lease(r);
    EXPECT_TRUE(l) << "not a lease";
    return l ? *l : messages::lease{};
  }
  messages::admin_request admin(const std::string& cmd, std::vector<std::string> args = {}) {
    messages::admin_request r;
    r.token = "t0k";
    r.command = cmd;
    r.args = std::move(args);
    return r;
  }
  // `stale`: the shard acks every group as stale (dropped at commit, for good).
  void commit(const messages::lease& l, bool stale = false) {
    messages::unit_report rep;
    rep.unit_id = l.unit.id;
    rep.attempt = l.attempt;
    rep.worker = l.worker;
    rep.samples_produced =
        static_cast<uint32_t>(l.unit.group_ids.size() * l.unit.samples_per_group);
    ASSERT_TRUE(core->report(rep));
    ledger::shard_ack ack{l.unit.id, l.attempt, l.shard, l.unit.group_ids, {}};
    if (stale) std::swap(ack.accepted_groups, ack.stale_groups);
    ASSERT_TRUE(core->shard_ack(ack));
  }
};

struct four_iterations_fixture : core_fixture {
  four_iterations_fixture() { iterations = 4; }
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
  for (auto& o : core->take_outbound())
    EXPECT_NE(o.node, trainer) << "the trainer group was touched";
  EXPECT_EQ(core->nodes().at(trainer).state, "running");
  // A dead node cannot lease any more.
  auto err = as_error(core->lease(messages::lease_request{rollout + "/0", 1, 0}));
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code, errc::unknown_node);
}

// The views an operator of a large fleet reads (bench fleet polls status every 0.1 s): the
// leases each rollout node holds in `nodes` (counted in one pass over the units), and the
// nodes per state in `status`, both following a node's death.
TEST_F(core_fixture, nodes_view_counts_each_rollouts_leases_and_status_counts_nodes_by_state) {
  const std::string other = hex_id('d');
  ASSERT_TRUE(core->register_node(hb(other, "rollout", "rollout-1")));
  auto a = lease(rollout + "/0");
  auto b = lease(other + "/0");
  auto c = lease(other + "/1");
  ASSERT_NE(a.unit.id, b.unit.id);
  ASSERT_NE(b.unit.id, c.unit.id);
  auto leases_of = [&](const std::string& name) {
    for (const auto& n : core->nodes_json())
      if (n["name"] == name) return n["leases"].get<uint32_t>();
    return uint32_t{999};
  };
  EXPECT_EQ(leases_of("rollout-0"), 1u);
  EXPECT_EQ(leases_of("rollout-1"), 2u);
  EXPECT_EQ(leases_of("buffer-0"), 0u);
  EXPECT_EQ(core->status_json()["nodes_by_state"], (nlohmann::json{{"running", 4}}));

  core->node_down(other, "test: SIGKILL");
  EXPECT_EQ(leases_of("rollout-1"), 0u);
  EXPECT_EQ(leases_of("rollout-0"), 1u);
  EXPECT_EQ(core->status_json()["nodes_by_state"], (nlohmann::json{{"dead", 1}, {"running", 3}}));
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

TEST_F(core_fixture, the_coordinators_own_stall_is_not_held_against_the_nodes) {
  clock.advance(6000);  // the coordinator itself did not run: its tick comes 6 s late
  core->stalled(6000);
  core->tick();
  EXPECT_EQ(core->nodes().at(rollout).state, "running");
  EXPECT_EQ(core->nodes().at(shard).state, "running");
  // Silence after the stall still counts.
  clock.advance(6000);
  core->tick();
  EXPECT_EQ(core->nodes().at(rollout).state, "dead");
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

// `nodes --history N`: the trainer's per-iteration lists cut to their newest N entries (what
// `moerl up` polls twice a second), the rest of the stats whole; bad counts named.
TEST_F(core_fixture, nodes_history_option_keeps_the_newest_entries_of_each_iteration_list) {
  json curve = json::array(), iterations = json::array();
  for (int i = 0; i < 30; ++i) {
    curve.push_back({{"iteration", i}, {"mean_reward", i / 30.0}});
    iterations.push_back({{"iteration", i}, {"t_train", 0.01}});
  }
  json versions = json::array();
  for (int v = 1; v <= 40; ++v) versions.push_back({{"version", v}, {"bytes", 100}});
  core->node_stats(trainer, {{"job",
                              {{"reward_curve", curve},
                               {"iterations", iterations},
                               {"weights", {{"versions", versions}, {"durable_version", 38}}},
                               {"reward_max", 1.0},
                               {"pending_groups", 2}}},
                             {"steps", 30}});
  auto trainer_stats = [&](const std::vector<std::pair<std::string, std::string>>& options) {
    auto req = admin("nodes");
    req.options = options;
    auto r = core->admin(req);
    EXPECT_TRUE(r.ok) << r.err.to_string();
    for (const auto& n : json::parse(r.body_json))
      if (n["id"] == trainer) return n["stats"];
    return json();
  };
  const json whole = trainer_stats({});
  EXPECT_EQ(whole["job"]["reward_curve"], curve);
  const json cut = trainer_stats({{"history", "3"}});
  ASSERT_EQ(cut["job"]["reward_curve"].size(), 3u);
  EXPECT_EQ(cut["job"]["reward_curve"].back(), curve.back());
  EXPECT_EQ(cut["job"]["reward_curve"][0], curve[27]);
  EXPECT_EQ(cut["job"]["iterations"].size(), 3u);
  ASSERT_EQ(cut["job"]["weights"]["versions"].size(), 3u);
  EXPECT_EQ(cut["job"]["weights"]["versions"][0]["version"], 38);
  EXPECT_EQ(cut["job"]["weights"]["durable_version"], 38);
  EXPECT_EQ(cut["job"]["reward_max"], 1.0);
  EXPECT_EQ(cut["job"]["pending_groups"], 2);
  EXPECT_EQ(cut["steps"], 30);
  EXPECT_EQ(trainer_stats({{"history", "0"}})["job"]["reward_curve"], json::array());
  EXPECT_EQ(trainer_stats({{"history", "100"}})["job"]["reward_curve"], curve);
  for (const char* bad : {"-1", "3x", "1e3", "999999999999"}) {
    auto req = admin("nodes");
    req.options = {{"history", bad}};
    auto r = core->admin(req);
    EXPECT_FALSE(r.ok) << bad;
    EXPECT_EQ(r.err.code, errc::invalid_argument) << bad;
    EXPECT_NE(r.err.message.find("--history"), std::string::npos) << r.err.message;
  }
}

TEST_F(core_fixture, registration_refuses_bad_ids_roles_and_shards_without_endpoint) {
  EXPECT_EQ(core->register_node(hb("xyz", "rollout", "r")).err().code, errc::invalid_argument);
  EXPECT_EQ(core->register_node(hb(hex_id('d'), "wizard", "w")).err().code, errc::invalid_argument);
  EXPECT_EQ(core->register_node(hb(hex_id('e'), "buffer", "b2")).err().code,
            errc::invalid_argument);
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

// The next iteration opens once the trainer reached the one before it: its version, plus
// the iterations' worth of groups dropped for good. Versions count steps of a full
// iteration's groups; an iteration whose groups were dropped as stale holds fewer, and on
// the version alone every later iteration opened only when the one before was wholly
// trained (no generation overlapping training).
TEST_F(four_iterations_fixture, groups_dropped_for_good_count_toward_the_iterations_reached) {
  commit(lease(rollout + "/0"), true);  // iteration 1: every group stale at commit
  commit(lease(rollout + "/0"), true);
  commit(lease(rollout + "/0"));  // iteration 2 (opened by this lease): committed, not trained
  commit(lease(rollout + "/0"));
  ASSERT_EQ(core->ledger().counters().dropped.at("stale_policy"), 8u);
  ASSERT_EQ(core->ledger().num_units(), 4u);
  EXPECT_EQ(core->current_policy_version(), 0u);
  core->tick();
  EXPECT_EQ(core->ledger().num_units(), 6u) << "iteration 3 opens: nothing of 1 is left to train";
  EXPECT_EQ(core->ledger().num_pending(), 2u);
}

// ---- batched leasing (actors.lease_batch) and group commit --------------------------------

namespace {

struct batch_fixture : ::testing::Test {
  ledger::manual_clock clock{1000};
  std::unique_ptr<coordinator_core> core;
  const std::string rollout = hex_id('a'), shard = hex_id('b');
  const std::string worker = rollout + "/0";

  // Units of 2 groups x 2 samples; shard capacity in samples (0: unlimited).
  void make(uint64_t capacity) {
    ledger::ledger_options lo;
    lo.lease_timeout_ms = 1000;
    lo.group_size = 2;
    lo.shard_capacity_samples = capacity;
    coordinator_options o;
    o.iterations = 1;
    o.units_per_iteration = 6;
    o.groups_per_unit = 2;
    o.heartbeat_timeout_ms = 5000;
    o.lease_batch = 4;
    core = moerl::test::make_core(clock, o, lo,
                                  {hb(rollout, "rollout", "rollout-0"),
                                   hb(shard, "buffer", "buffer-0", "tcp://127.0.0.1:1")});
    ASSERT_TRUE(core);
  }
  std::vector<messages::lease> batch(uint32_t max_units) {
    auto b = core->lease_batch(messages::lease_request{worker, max_units, 0});
    EXPECT_TRUE(b) << "not a lease batch: " << (b ? "" : b.err().to_string());
    return b ? b->leases : std::vector<messages::lease>{};
  }
  size_t shard_events() {
    size_t n = 0;
    for (auto& o : core->take_outbound())
      n += o.what == outbound::kind::shard_event && o.node == shard;
    return n;
  }
  void expect_books_balance() {
    const auto& a = core->ledger().counters();
    EXPECT_EQ(a.dispatched, a.committed + a.in_flight + a.dropped_total());
    EXPECT_EQ(a.lost, 0u);
    EXPECT_EQ(a.duplicated, 0u);
    EXPECT_TRUE(core->ledger().check_invariant());
  }
};

}  // namespace

TEST_F(batch_fixture, batch_reply_carries_up_to_lease_batch_leases_each_complete) {
  make(0);
  auto b = batch(100);  // asks for more than actors.lease_batch: gets 4
  ASSERT_EQ(b.size(), 4u);
  std::set<uint64_t> units;
  for (auto& l : b) {
    units.insert(l.unit.id);
    EXPECT_EQ(l.worker, worker);
    EXPECT_EQ(l.shard, "buffer-0");
    EXPECT_EQ(l.shard_endpoint, "tcp://127.0.0.1:1");
    EXPECT_EQ(l.unit.group_ids.size(), 2u);
    EXPECT_EQ(l.unit.samples_per_group, 2u);
    EXPECT_EQ(l.unit.task, "modpow");
    EXPECT_GT(l.deadline_unix_ms, 0u);
    EXPECT_EQ(core->ledger().find(l.unit.id)->attempt, l.attempt);
  }
  EXPECT_EQ(units.size(), 4u);
  EXPECT_EQ(core->nodes().at(rollout).leases, 4u);
  EXPECT_EQ(shard_events(), 4u) << "the shard hears of every attempt";
  EXPECT_EQ(batch(2).size(), 2u);
  auto err = as_error(core->lease_batch(messages::lease_request{worker, 4, 0}));
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code, errc::not_found);
  expect_books_balance();
}

TEST_F(batch_fixture, batch_respects_shard_capacity) {
  make(8);  // two units of 4 samples fit
  auto b = batch(4);
  EXPECT_EQ(b.size(), 2u);
  auto err = as_error(core->lease_batch(messages::lease_request{worker, 4, 0}));
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code, errc::capacity_exceeded);
  EXPECT_EQ(core->ledger().num_pending(), 4u);
  expect_books_balance();
}

TEST_F(batch_fixture, rollout_node_dying_with_a_batch_reopens_all_of_it) {
  make(0);
  auto b = batch(4);
  ASSERT_EQ(b.size(), 4u);
  core->node_down(rollout, "test: SIGKILL");
  for (auto& l : b) EXPECT_EQ(core->ledger().find(l.unit.id)->state, ledger::unit_state::pending);
  EXPECT_EQ(core->ledger().num_leased(), 0u);
  EXPECT_EQ(core->ledger().counters().dropped.at("worker_dead"), 16u);
  expect_books_balance();
}

TEST_F(batch_fixture, drain_gives_back_unstarted_leases_in_one_message) {
  make(0);
  auto b = batch(4);
  ASSERT_EQ(b.size(), 4u);
  // The first one was worked and committed; the other three were never started.
  messages::unit_report rep;
  rep.unit_id = b[0].unit.id;
  rep.attempt = b[0].attempt;
  rep.worker = worker;
  rep.samples_produced = 4;
  ASSERT_TRUE(core->report(rep));
  ASSERT_TRUE(core->shard_ack({b[0].unit.id, b[0].attempt, "buffer-0", b[0].unit.group_ids, {}}));
  messages::lease_give_back rest{worker, {}};
  for (size_t i = 1; i < b.size(); ++i) rest.leases.push_back({b[i].unit.id, b[i].attempt});
  auto packed = messages::decode<messages::lease_give_back>(messages::encode(rest));
  ASSERT_TRUE(packed);
  EXPECT_TRUE(core->give_back(*packed));
  for (auto& l : rest.leases)
    EXPECT_EQ(core->ledger().find(l.unit)->state, ledger::unit_state::pending);
  EXPECT_EQ(core->ledger().counters().dropped.at("returned"), 12u);
  EXPECT_EQ(core->ledger().counters().committed, 4u);
  EXPECT_EQ(core->nodes().at(rollout).leases, 0u);
  // Giving back again (or a lease of another attempt) is refused; the refusal names it.
  auto err = as_error(core->give_back({worker, {rest.leases[0]}}));
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code, errc::stale_attempt);
  expect_books_balance();
}

TEST_F(batch_fixture, draining_or_unknown_worker_gets_no_batch) {
  make(0);
  auto err = as_error(core->lease_batch(messages::lease_request{hex_id('9') + "/0", 4, 0}));
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code, errc::unknown_node);
  auto h = hb(rollout, "rollout", "rollout-0");
  h.state = "draining";
  ASSERT_TRUE(core->heartbeat(h));
  err = as_error(core->lease_batch(messages::lease_request{worker, 4, 0}));
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code, errc::shutting_down);
  EXPECT_EQ(core->ledger().num_leased(), 0u);
}

TEST_F(batch_fixture, group_commit_holds_shard_events_until_the_one_flush) {
  make(0);
  core->set_group_commit(true);
  auto first = batch(2);
  auto second = batch(2);
  ASSERT_EQ(first.size() + second.size(), 4u);
  EXPECT_TRUE(core->flush_due());
  EXPECT_EQ(shard_events(), 0u) << "nothing leaves before the records are durable";
  ASSERT_TRUE(core->flush());
  EXPECT_FALSE(core->flush_due());
  EXPECT_EQ(shard_events(), 4u);
  expect_books_balance();
}

// A dropped CAF link is not a death: the node is unreachable for the re-join grace, and a
// node that re-joins in time keeps its leases and its shard's samples.
TEST_F(core_fixture, a_link_blip_with_a_quick_rejoin_costs_nothing) {
  auto l = lease(rollout + "/0");
  commit(lease(rollout + "/1"));
  core->link_lost(rollout, "test: link dropped");
  core->link_lost(shard, "test: link dropped");
  EXPECT_EQ(core->nodes().at(shard).state, "unreachable");
  clock.advance(100);  // back within tens of ms, inside the grace and the lease
  core->tick();
  EXPECT_EQ(core->ledger().find(l.unit.id)->state, ledger::unit_state::leased);
  ASSERT_TRUE(core->register_node(hb(rollout, "rollout", "rollout-0")));
  ASSERT_TRUE(core->register_node(hb(shard, "buffer", "buffer-0", "tcp://127.0.0.1:1")));
  clock.advance(coordinator_core::kRejoinGraceMs);  // past the grace (and the lease: it may expire)
  core->tick();
  EXPECT_EQ(core->nodes().at(shard).state, "running");
  EXPECT_EQ(core->nodes().at(rollout).state, "running");
  EXPECT_EQ(core->ledger().counters().dropped.count("shard_lost"), 0u);
  EXPECT_EQ(core->ledger().counters().dropped.count("worker_dead"), 0u);
  EXPECT_TRUE(core->ledger().check_invariant());
}

TEST_F(core_fixture, an_unreachable_node_that_does_not_rejoin_is_down_after_the_grace) {
  auto l = lease(rollout + "/0");
  core->link_lost(rollout, "test: SIGKILL");
  core->tick();
  EXPECT_EQ(core->ledger().find(l.unit.id)->state, ledger::unit_state::leased);
  clock.advance(coordinator_core::kRejoinGraceMs + 1);
  core->tick();
  EXPECT_EQ(core->nodes().at(rollout).state, "dead");
  EXPECT_EQ(core->ledger().find(l.unit.id)->state, ledger::unit_state::pending);
  EXPECT_TRUE(core->ledger().check_invariant());
}

// A node declared dead stays dead: its groups were re-opened, so a shard that was only
// starved (SIGSTOP, load) must not come back and serve them too. Its re-join and heartbeats
// are refused as peer_dead ("fenced"), and nothing of the ledger changes.
TEST_F(core_fixture, a_node_declared_dead_by_heartbeat_silence_is_fenced_when_it_rejoins) {
  auto l = lease(rollout + "/0");
  commit(l);
  clock.advance(4000);
  ASSERT_TRUE(core->heartbeat(hb(rollout, "rollout", "rollout-0")));
  ASSERT_TRUE(core->heartbeat(hb(trainer, "trainer", "trainer-0")));
  clock.advance(2000);
  core->tick();
  ASSERT_EQ(core->nodes().at(shard).state, "dead");
  auto counters = core->ledger().counters();
  EXPECT_EQ(counters.dropped.at("shard_lost"), 4u);
  core->take_outbound();

  auto beat = core->heartbeat(hb(shard, "buffer", "buffer-0", "tcp://127.0.0.1:1"));
  ASSERT_FALSE(beat);
  EXPECT_EQ(beat.err().code, errc::peer_dead);
  auto rejoin = core->register_node(hb(shard, "buffer", "buffer-0", "tcp://127.0.0.1:1"));
  ASSERT_FALSE(rejoin);
  EXPECT_EQ(rejoin.err().code, errc::peer_dead);
  EXPECT_NE(rejoin.err().message.find("declared dead"), std::string::npos) << rejoin.err().message;
  EXPECT_NE(rejoin.err().message.find("no heartbeat"), std::string::npos) << rejoin.err().message;

  EXPECT_EQ(core->nodes().at(shard).state, "dead");
  EXPECT_TRUE(core->take_outbound().empty());  // no events, no policy version: not a member
  EXPECT_EQ(core->ledger().counters().dropped.at("shard_lost"), 4u);
  EXPECT_EQ(core->ledger().find(l.unit.id)->state, ledger::unit_state::pending);
  EXPECT_TRUE(core->ledger().check_invariant());

  // The replacement process has a new node id (it starts empty) and joins as usual.
  EXPECT_TRUE(core->register_node(hb(hex_id('e'), "buffer", "buffer-0", "tcp://127.0.0.1:2")));
}

// A shard's replacement process that joins while its predecessor is still within the
// re-join grace (a pod controller restarts a SIGKILLed shard in ~1.5 s, the grace is 2 s):
// the predecessor is declared down at once (its groups re-opened, it is fenced) and the
// successor keeps the shard. Before, the predecessor's grace ran out after the successor had
// joined, its shard_lost forgot the successor's shard, and no unit was leased to it again.
TEST_F(core_fixture, a_shard_replaced_within_the_rejoin_grace_keeps_its_successor) {
  commit(lease(rollout + "/0"));
  core->link_lost(shard, "test: SIGKILL");
  clock.advance(coordinator_core::kRejoinGraceMs / 2);
  const std::string successor = hex_id('e');
  ASSERT_TRUE(core->register_node(hb(successor, "buffer", "buffer-0", "tcp://127.0.0.1:2")));
  EXPECT_EQ(core->nodes().at(shard).state, "dead");
  EXPECT_NE(core->nodes().at(shard).down_reason.find("replaced"), std::string::npos)
      << core->nodes().at(shard).down_reason;
  EXPECT_EQ(core->ledger().counters().dropped.at("shard_lost"), 4u);  // its samples are gone
  bool fenced = false;
  for (const auto& o : core->take_outbound())
    fenced |= o.what == outbound::kind::signal && o.node == shard && o.signal == SIGKILL;
  EXPECT_TRUE(fenced) << "the predecessor may still run: it is fenced";
  clock.advance(coordinator_core::kRejoinGraceMs);  // past the predecessor's grace
  core->tick();
  EXPECT_EQ(core->nodes().at(successor).state, "running");
  auto l = lease(rollout + "/1");
  EXPECT_EQ(l.shard, "buffer-0");
  EXPECT_EQ(l.shard_endpoint, "tcp://127.0.0.1:2") << "units go to the successor";
  EXPECT_TRUE(core->ledger().check_invariant());
}

TEST_F(core_fixture, a_node_down_after_the_rejoin_grace_is_fenced_when_it_rejoins) {
  core->link_lost(shard, "test: link dropped");
  // While unreachable, a heartbeat is not taken as a sign of life (only a re-join is).
  auto beat = core->heartbeat(hb(shard, "buffer", "buffer-0", "tcp://127.0.0.1:1"));
  ASSERT_FALSE(beat);
  EXPECT_EQ(beat.err().code, errc::unknown_node);
  clock.advance(coordinator_core::kRejoinGraceMs + 1);
  core->tick();
  ASSERT_EQ(core->nodes().at(shard).state, "dead");
  auto rejoin = core->register_node(hb(shard, "buffer", "buffer-0", "tcp://127.0.0.1:1"));
  ASSERT_FALSE(rejoin);
  EXPECT_EQ(rejoin.err().code, errc::peer_dead);
  EXPECT_EQ(core->nodes().at(shard).state, "dead");
}

TEST_F(core_fixture, a_node_that_gave_up_keeps_its_cause_in_the_node_list) {
  core->gave_up(trainer, "trainer-supervisor: max restart intensity reached: No space left");
  core->node_down(trainer, "monitor: exited");
  bool seen = false;
  for (const auto& n : core->nodes_json()) {
    if (n["name"] != "trainer-0") {
      EXPECT_FALSE(n.contains("gave_up")) << n.dump();
      continue;
    }
    seen = true;
    EXPECT_EQ(n["gave_up"], "trainer-supervisor: max restart intensity reached: No space left");
    EXPECT_EQ(n["state"], "dead");
  }
  EXPECT_TRUE(seen);
  core->gave_up(hex_id('9'), "an unknown node is ignored");
  EXPECT_EQ(core->nodes().count(hex_id('9')), 0u);
}

TEST_F(core_fixture, a_lost_trainer_consumer_is_declared_to_every_shard_and_to_one_that_rejoins) {
  core->take_outbound();
  core->node_down(trainer, "test: SIGKILL");
  auto lost = [](const std::vector<outbound>& out) {
    std::vector<outbound> l;
    for (const auto& o : out)
      if (o.what == outbound::kind::consumer_lost) l.push_back(o);
    return l;
  };
  auto sent = lost(core->take_outbound());
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].node, shard);
  EXPECT_EQ(sent[0].consumer, "trainer-0");
  // A bound every incarnation the dead trainer made is below (wall-clock µs, now).
  EXPECT_GE(sent[0].version, static_cast<uint64_t>(unix_now_ms() - 60000) * 1000);
  // A shard that re-joins (a coordinator restart, a blip) is told again.
  ASSERT_TRUE(core->register_node(hb(shard, "buffer", "buffer-0", "tcp://127.0.0.1:1")));
  auto again = lost(core->take_outbound());
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].version, sent[0].version);
}

TEST_F(core_fixture, a_trainer_with_a_running_successor_of_its_name_is_not_declared_lost) {
  // The recreated trainer-0 (a new process, a new node id) already runs: its newer
  // incarnation's first request releases what the old one held.
  ASSERT_TRUE(core->register_node(hb(hex_id('f'), "trainer", "trainer-0")));
  core->take_outbound();
  core->node_down(trainer, "test: SIGKILL");
  for (const auto& o : core->take_outbound())
    EXPECT_NE(o.what, outbound::kind::consumer_lost) << o.consumer;
}

TEST_F(core_fixture, a_drained_trainer_is_declared_lost_too) {
  // A drained trainer (a Spot notice) leaves as a dead one does: nothing but a successor
  // would ever release what it held.
  core->take_outbound();
  core->drained(trainer, {{"source", "spot"}});
  size_t num_lost = 0;
  for (const auto& o : core->take_outbound())
    num_lost += o.what == outbound::kind::consumer_lost && o.consumer == "trainer-0";
  EXPECT_EQ(num_lost, 1u);
}
