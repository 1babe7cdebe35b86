// Every transition of a work unit and every illegal one, on an in-memory ledger with a
// manual clock: no sleeps, no store.
#include <gtest/gtest.h>

#include "ledger/work_ledger.h"

namespace moerl::ledger {
namespace {

class ledger_transitions : public ::testing::Test {
 protected:
  void SetUp() override {
    opts.lease_timeout_ms = 1000;
    opts.group_size = 4;
    opts.max_groups_per_unit = 3;
    auto l = work_ledger::open(opts, clk, nullptr);
    ASSERT_TRUE(l.ok()) << l.err().to_string();
    led = std::move(*l);
    ASSERT_TRUE(led->add_shard("s0").ok());
  }
  lease take(const std::string& worker) {
    auto l = led->acquire(worker);
    EXPECT_TRUE(l.ok()) << l.err().to_string();
    return l.ok() ? *l : lease{};
  }
  shard_ack ack_all(const lease& l) { return shard_ack{l.unit, l.attempt, l.shard, l.groups, {}}; }
  void expect_invariant() {
    auto s = led->check_invariant();
    EXPECT_TRUE(s.ok()) << s.err().to_string();
  }

  ledger_options opts;
  manual_clock clk{0};
  std::unique_ptr<work_ledger> led;
};

TEST_F(ledger_transitions, pending_unit_is_leased_with_deadline_groups_and_shard) {
  auto u = led->add_unit({11, 12});
  ASSERT_TRUE(u.ok());
  clk.set(500);
  lease l = take("w1");
  EXPECT_EQ(l.unit, *u);
  EXPECT_EQ(l.worker, "w1");
  EXPECT_EQ(l.shard, "s0");
  EXPECT_EQ(l.deadline_ms, 1500);
  EXPECT_EQ(l.groups, (std::vector<group_id>{11, 12}));
  EXPECT_EQ(l.num_samples(), 8u);
  EXPECT_EQ(attempt_epoch(l.attempt), 1u);
  EXPECT_EQ(attempt_counter(l.attempt), 1u);
  EXPECT_EQ(led->find(*u)->state, unit_state::leased);
  EXPECT_EQ(led->counters().dispatched, 8u);
  EXPECT_EQ(led->counters().in_flight, 8u);
  expect_invariant();
}

TEST_F(ledger_transitions, unit_commits_only_when_report_and_ack_are_both_in_either_order) {
  ASSERT_TRUE(led->add_unit({1}).ok());
  ASSERT_TRUE(led->add_unit({2}).ok());
  lease a = take("w1");
  lease b = take("w1");
  // report first, then ack
  EXPECT_EQ(*led->report(a.unit, a.attempt, "w1", 4), unit_state::leased);
  EXPECT_EQ(*led->record_ack(ack_all(a)), unit_state::committed);
  // ack first, then report
  EXPECT_EQ(*led->record_ack(ack_all(b)), unit_state::leased);
  EXPECT_EQ(*led->report(b.unit, b.attempt, "w1", 4), unit_state::committed);
  EXPECT_EQ(led->counters().committed, 8u);
  EXPECT_EQ(led->counters().in_flight, 0u);
  auto ev = led->take_events();
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[0].what, ledger_event::kind::attempt_opened);
  EXPECT_EQ(ev[2].what, ledger_event::kind::unit_committed);
  EXPECT_EQ(ev[2].unit, a.unit);
  expect_invariant();
}

TEST_F(ledger_transitions, acquire_with_nothing_pending_is_not_found_and_without_shard_is_refused) {
  auto none = led->acquire("w1");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.err().code, errc::not_found);
  auto l2 = work_ledger::open(opts, clk, nullptr);
  ASSERT_TRUE((*l2)->add_unit({1}).ok());
  auto noshard = (*l2)->acquire("w1");
  ASSERT_FALSE(noshard.ok());
  EXPECT_EQ(noshard.err().code, errc::capacity_exceeded);
}

TEST_F(ledger_transitions, bad_units_are_refused_with_a_reason) {
  EXPECT_EQ(led->add_unit({}).err().code, errc::invalid_argument);
  EXPECT_EQ(led->add_unit({1, 2, 3, 4}).err().code, errc::invalid_argument);
  auto rep = led->add_unit({7, 7});
  ASSERT_FALSE(rep.ok());
  EXPECT_NE(rep.err().message.find("repeat"), std::string::npos);
  EXPECT_EQ(led->num_units(), 0u);
}

TEST_F(ledger_transitions, renew_moves_the_deadline_and_only_the_holder_may_renew) {
  ASSERT_TRUE(led->add_unit({1}).ok());
  lease l = take("w1");
  clk.set(900);
  auto d = led->renew(l.unit, l.attempt, "w1");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, 1900);
  EXPECT_EQ(led->renew(l.unit, l.attempt, "w2").err().code, errc::stale_attempt);
  EXPECT_EQ(led->renew(l.unit, l.attempt + 1, "w1").err().code, errc::stale_attempt);
  EXPECT_EQ(led->renew(99, l.attempt, "w1").err().code, errc::not_found);
  clk.set(1500);  // past the first deadline, before the renewed one
  EXPECT_TRUE(led->expire_due().empty());
}

TEST_F(ledger_transitions, expiry_on_deadline_returns_the_unit_with_a_new_fencing_token) {
  ASSERT_TRUE(led->add_unit({1, 2}).ok());
  lease l = take("w1");
  clk.set(999);
  EXPECT_TRUE(led->expire_due().empty());
  clk.set(1000);
  auto ended = led->expire_due();
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].unit, l.unit);
  EXPECT_STREQ(ended[0].reason, drop_reason::lease_expired);
  EXPECT_EQ(led->find(l.unit)->state, unit_state::pending);
  EXPECT_EQ(led->counters().dropped.at("lease_expired"), 8u);

  lease again = take("w2");
  EXPECT_EQ(again.unit, l.unit);
  EXPECT_GT(again.attempt, l.attempt);
  // The first worker is fenced off everywhere.
  EXPECT_EQ(led->report(l.unit, l.attempt, "w1", 8).err().code, errc::stale_attempt);
  EXPECT_EQ(led->renew(l.unit, l.attempt, "w1").err().code, errc::stale_attempt);
  EXPECT_EQ(led->give_back(l.unit, l.attempt, "w1").err().code, errc::stale_attempt);
  EXPECT_EQ(led->record_ack(ack_all(l)).err().code, errc::stale_attempt);
  EXPECT_EQ(led->counters().dispatched, 16u);
  expect_invariant();
}

TEST_F(ledger_transitions, give_back_returns_the_unit_and_fences_the_attempt) {
  ASSERT_TRUE(led->add_unit({1}).ok());
  lease l = take("w1");
  led->take_events();
  ASSERT_TRUE(led->give_back(l.unit, l.attempt, "w1").ok());
  EXPECT_EQ(led->find(l.unit)->state, unit_state::pending);
  EXPECT_EQ(led->counters().dropped.at("returned"), 4u);
  auto ev = led->take_events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].what, ledger_event::kind::attempt_fenced);
  EXPECT_EQ(ev[0].attempt, l.attempt);
  EXPECT_EQ(led->give_back(l.unit, l.attempt, "w1").err().code, errc::stale_attempt);
  expect_invariant();
}

TEST_F(ledger_transitions, worker_death_expires_all_of_its_leases_and_no_others) {
  for (group_id g = 1; g <= 3; ++g) ASSERT_TRUE(led->add_unit({g}).ok());
  lease a = take("w1");
  lease b = take("w2");
  lease c = take("w1");
  auto ended = led->worker_dead("w1");
  ASSERT_EQ(ended.size(), 2u);
  EXPECT_EQ(led->find(a.unit)->state, unit_state::pending);
  EXPECT_EQ(led->find(c.unit)->state, unit_state::pending);
  EXPECT_EQ(led->find(b.unit)->state, unit_state::leased);
  EXPECT_EQ(led->counters().dropped.at("worker_dead"), 8u);
  EXPECT_TRUE(led->worker_dead("w1").empty());
  expect_invariant();
}

TEST_F(ledger_transitions, illegal_reports_and_acks_are_refused_and_change_nothing) {
  ASSERT_TRUE(led->add_unit({1, 2}).ok());
  lease l = take("w1");
  auto before = led->counters().to_json();
  EXPECT_EQ(led->report(l.unit, l.attempt, "w1", 7).err().code, errc::invalid_argument);
  EXPECT_EQ(led->report(l.unit, l.attempt, "w2", 8).err().code, errc::stale_attempt);
  EXPECT_EQ(led->record_ack({l.unit, l.attempt, "s0", {1}, {}}).err().code,
            errc::invalid_argument);  // a group missing
  EXPECT_EQ(led->record_ack({l.unit, l.attempt, "s0", {1, 2, 3}, {}}).err().code,
            errc::invalid_argument);  // a group too many
  EXPECT_EQ(led->record_ack({l.unit, l.attempt, "s9", {1, 2}, {}}).err().code,
            errc::invalid_argument);  // wrong shard
  EXPECT_EQ(led->counters().to_json(), before);
  ASSERT_TRUE(led->report(l.unit, l.attempt, "w1", 8).ok());
  EXPECT_EQ(led->report(l.unit, l.attempt, "w1", 8).err().code, errc::duplicate);
  ASSERT_TRUE(led->record_ack(ack_all(l)).ok());
  // committed: the lease is over
  EXPECT_EQ(led->record_ack(ack_all(l)).err().code, errc::stale_attempt);
  EXPECT_EQ(led->give_back(l.unit, l.attempt, "w1").err().code, errc::stale_attempt);
  clk.set(10'000);
  EXPECT_TRUE(led->expire_due().empty());  // a committed unit never expires
  expect_invariant();
}

TEST_F(ledger_transitions, stale_groups_are_dropped_with_a_reason_and_never_served) {
  ASSERT_TRUE(led->add_unit({1, 2, 3}).ok());
  lease l = take("w1");
  ASSERT_TRUE(led->report(l.unit, l.attempt, "w1", 12).ok());
  ASSERT_TRUE(led->record_ack({l.unit, l.attempt, "s0", {1, 3}, {2}}).ok());
  EXPECT_EQ(led->counters().committed, 8u);
  EXPECT_EQ(led->counters().dropped.at("stale_policy"), 4u);
  EXPECT_EQ(led->find(l.unit)->committed, (std::vector<group_id>{1, 3}));
  expect_invariant();
}

TEST_F(ledger_transitions, consumption_counts_trained_once_and_flags_a_second_hand_out) {
  ASSERT_TRUE(led->add_unit({1, 2}).ok());
  lease l = take("w1");
  ASSERT_TRUE(led->report(l.unit, l.attempt, "w1", 8).ok());
  ASSERT_TRUE(led->record_ack(ack_all(l)).ok());
  ASSERT_TRUE(led->record_consumed({l.unit, l.attempt, 1, 4}).ok());
  EXPECT_EQ(led->counters().trained, 4u);
  EXPECT_TRUE(led->check_invariant().ok());
  auto again = led->record_consumed({l.unit, l.attempt, 1, 4});
  EXPECT_EQ(again.err().code, errc::duplicate);
  EXPECT_EQ(led->counters().duplicated, 4u);
  EXPECT_FALSE(led->check_invariant().ok());  // the report must show it
  EXPECT_EQ(led->record_consumed({l.unit, l.attempt, 9, 4}).err().code, errc::invalid_argument);
  EXPECT_EQ(led->record_consumed({l.unit, l.attempt, 2, 3}).err().code, errc::invalid_argument);
}

TEST_F(ledger_transitions, a_re_sent_consumption_with_the_same_hand_out_id_is_accepted_once) {
  ASSERT_TRUE(led->add_unit({1, 2}).ok());
  lease l = take("w1");
  ASSERT_TRUE(led->report(l.unit, l.attempt, "w1", 8).ok());
  ASSERT_TRUE(led->record_ack(ack_all(l)).ok());
  ASSERT_TRUE(led->record_consumed({l.unit, l.attempt, 1, 4, /*handout=*/77}).ok());
  // The shard's reply was lost and it sends the same hand-out again: nothing changes.
  ASSERT_TRUE(led->record_consumed({l.unit, l.attempt, 1, 4, 77}).ok());
  EXPECT_EQ(led->counters().trained, 4u);
  EXPECT_EQ(led->counters().duplicated, 0u);
  EXPECT_TRUE(led->check_invariant().ok());
  // A second hand-out of the same group (another id) is a real duplicate.
  EXPECT_EQ(led->record_consumed({l.unit, l.attempt, 1, 4, 78}).err().code, errc::duplicate);
  EXPECT_EQ(led->counters().duplicated, 4u);
}

TEST_F(ledger_transitions, leases_go_round_robin_and_respect_shard_capacity) {
  opts.shard_capacity_samples = 8;  // two one-group units per shard
  led = std::move(*work_ledger::open(opts, clk, nullptr));
  ASSERT_TRUE(led->add_shard("a").ok());
  ASSERT_TRUE(led->add_shard("b").ok());
  for (group_id g = 1; g <= 5; ++g) ASSERT_TRUE(led->add_unit({g}).ok());
  std::vector<lease> ls;
  for (int i = 0; i < 4; ++i) ls.push_back(take("w"));
  EXPECT_EQ(ls[0].shard, "a");
  EXPECT_EQ(ls[1].shard, "b");
  EXPECT_EQ(ls[2].shard, "a");
  EXPECT_EQ(ls[3].shard, "b");
  auto full = led->acquire("w");
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.err().code, errc::capacity_exceeded);
  // Committing does not free room (the samples still sit in the shard); training does.
  ASSERT_TRUE(led->report(ls[0].unit, ls[0].attempt, "w", 4).ok());
  ASSERT_TRUE(led->record_ack(ack_all(ls[0])).ok());
  EXPECT_EQ(led->acquire("w").err().code, errc::capacity_exceeded);
  ASSERT_TRUE(led->record_consumed({ls[0].unit, ls[0].attempt, 1, 4}).ok());
  lease fifth = take("w");
  EXPECT_EQ(fifth.shard, "a");
  expect_invariant();
}

TEST_F(ledger_transitions, accounting_serialises_to_the_report_shape) {
  ASSERT_TRUE(led->add_unit({1}).ok());
  lease l = take("w1");
  ASSERT_TRUE(led->give_back(l.unit, l.attempt, "w1").ok());
  auto j = led->counters().to_json();
  for (const char* k :
       {"dispatched", "committed", "in_flight", "dropped", "lost", "duplicated", "trained"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["dispatched"], 4);
  EXPECT_EQ(j["dropped"]["returned"], 4);
  EXPECT_EQ(j["lost"], 0);
}

}  // namespace
}  // namespace moerl::ledger
