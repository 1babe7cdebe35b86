// Batched leasing (work_ledger::acquire_batch): a batch is K ordinary leases, so every
// property of a single lease must hold for each of them, and the batch must not get around
// shard capacity, worker death or a give-back. In-memory ledger, manual clock, no sleeps.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "ledger/work_ledger.h"
#include "store/local_store.h"
#include "tests/support/temp_dir.h"

namespace moerl::ledger {
namespace {

class ledger_batch : public ::testing::Test {
 protected:
  void open_ledger(uint64_t capacity = 0) {
    opts.lease_timeout_ms = 1000;
    opts.group_size = 4;
    opts.max_groups_per_unit = 2;
    opts.shard_capacity_samples = capacity;
    auto l = work_ledger::open(opts, clk, nullptr);
    ASSERT_TRUE(l.ok()) << l.err().to_string();
    led = std::move(*l);
  }
  void add_units(int n) {
    for (int i = 0; i < n; ++i) ASSERT_TRUE(led->add_unit({next_group++}).ok());
  }
  void expect_invariant() {
    auto s = led->check_invariant();
    EXPECT_TRUE(s.ok()) << s.err().to_string();
    const auto& a = led->counters();
    EXPECT_EQ(a.dispatched, a.committed + a.in_flight + a.dropped_total());
    EXPECT_EQ(a.lost, 0u);
    EXPECT_EQ(a.duplicated, 0u);
  }

  ledger_options opts;
  manual_clock clk{100};
  std::unique_ptr<work_ledger> led;
  group_id next_group = 1;
};

TEST_F(ledger_batch, batch_is_k_distinct_fifo_leases_each_with_its_attempt_deadline_and_event) {
  open_ledger();
  ASSERT_TRUE(led->add_shard("s0").ok());
  add_units(5);
  auto b = led->acquire_batch("w1", 3);
  ASSERT_TRUE(b.ok()) << b.err().to_string();
  ASSERT_EQ(b->size(), 3u);
  for (size_t i = 0; i < b->size(); ++i) {
    const lease& l = (*b)[i];
    EXPECT_EQ(l.unit, i + 1) << "oldest pending first";
    EXPECT_EQ(l.worker, "w1");
    EXPECT_EQ(l.shard, "s0");
    EXPECT_EQ(l.deadline_ms, 1100);
    EXPECT_EQ(attempt_counter(l.attempt), 1u);
    EXPECT_EQ(led->find(l.unit)->state, unit_state::leased);
  }
  EXPECT_EQ(led->num_leased(), 3u);
  EXPECT_EQ(led->num_pending(), 2u);
  EXPECT_EQ(led->counters().in_flight, 12u);
  auto ev = led->take_events();
  ASSERT_EQ(ev.size(), 3u);
  for (const auto& e : ev) EXPECT_EQ(e.what, ledger_event::kind::attempt_opened);
  expect_invariant();
}

TEST_F(ledger_batch,
       batch_larger_than_the_queue_gets_what_is_pending_and_an_empty_queue_is_not_found) {
  open_ledger();
  ASSERT_TRUE(led->add_shard("s0").ok());
  add_units(2);
  auto b = led->acquire_batch("w1", 64);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->size(), 2u);
  auto none = led->acquire_batch("w1", 64);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.err().code, errc::not_found);
  auto zero = led->acquire_batch("w1", 0);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.err().code, errc::invalid_argument);
  expect_invariant();
}

TEST_F(ledger_batch, batch_respects_shard_capacity_and_spreads_round_robin) {
  // Units of 4 samples, shards of 8: at most 2 open units per shard, 4 in all.
  open_ledger(8);
  ASSERT_TRUE(led->add_shard("s0").ok());
  ASSERT_TRUE(led->add_shard("s1").ok());
  add_units(10);
  auto b = led->acquire_batch("w1", 10);
  ASSERT_TRUE(b.ok()) << b.err().to_string();
  ASSERT_EQ(b->size(), 4u) << "the batch stops where the shards are full";
  std::map<shard_id, int> per_shard;
  for (const auto& l : *b) ++per_shard[l.shard];
  EXPECT_EQ(per_shard["s0"], 2);
  EXPECT_EQ(per_shard["s1"], 2);
  EXPECT_EQ(led->num_pending(), 6u);
  auto full = led->acquire_batch("w2", 10);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.err().code, errc::capacity_exceeded);
  // One unit commits and a trainer takes its group: room for exactly one more unit.
  const lease& l = (*b)[0];
  ASSERT_TRUE(led->report(l.unit, l.attempt, "w1", 4).ok());
  ASSERT_TRUE(led->record_ack({l.unit, l.attempt, l.shard, l.groups, {}}).ok());
  ASSERT_TRUE(led->record_consumed({l.unit, l.attempt, l.groups[0], 4, 1}).ok());
  auto more = led->acquire_batch("w2", 10);
  ASSERT_TRUE(more.ok());
  EXPECT_EQ(more->size(), 1u);
  EXPECT_EQ((*more)[0].shard, l.shard);
  expect_invariant();
}

TEST_F(ledger_batch, worker_dying_with_a_batch_reopens_every_unit_and_fences_every_attempt) {
  open_ledger();
  ASSERT_TRUE(led->add_shard("s0").ok());
  add_units(6);
  auto b = led->acquire_batch("w1", 5);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->size(), 5u);
  auto other = led->acquire("w2");  // another worker's lease must survive
  ASSERT_TRUE(other.ok());
  (void)led->take_events();
  auto ended = led->worker_dead("w1");
  ASSERT_EQ(ended.size(), 5u);
  for (const auto& e : ended) EXPECT_EQ(std::string(e.reason), drop_reason::worker_dead);
  EXPECT_EQ(led->counters().dropped.at(drop_reason::worker_dead), 20u);
  EXPECT_EQ(led->num_leased(), 1u);
  EXPECT_EQ(led->num_pending(), 5u);
  auto ev = led->take_events();
  ASSERT_EQ(ev.size(), 5u);
  for (const auto& e : ev) EXPECT_EQ(e.what, ledger_event::kind::attempt_fenced);
  // Every old attempt is fenced: reports of the dead batch are refused.
  for (const auto& l : *b) {
    auto r = led->report(l.unit, l.attempt, "w1", 4);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.err().code, errc::stale_attempt);
  }
  // The re-opened units are leased again with higher attempts, to a live worker.
  auto again = led->acquire_batch("w3", 10);
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->size(), 5u);
  std::map<unit_id, attempt_t> old;
  for (const auto& l : *b) old[l.unit] = l.attempt;
  for (const auto& l : *again) {
    ASSERT_TRUE(old.count(l.unit));
    EXPECT_GT(l.attempt, old[l.unit]);
  }
  expect_invariant();
}

TEST_F(ledger_batch,
       drain_gives_back_the_unstarted_leases_of_a_batch_and_commits_the_finished_one) {
  open_ledger();
  ASSERT_TRUE(led->add_shard("s0").ok());
  add_units(4);
  auto b = led->acquire_batch("w1", 4);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->size(), 4u);
  const lease& done = (*b)[0];
  ASSERT_TRUE(led->report(done.unit, done.attempt, "w1", 4).ok());
  ASSERT_EQ(*led->record_ack({done.unit, done.attempt, done.shard, done.groups, {}}),
            unit_state::committed);
  for (size_t i = 1; i < b->size(); ++i)
    ASSERT_TRUE(led->give_back((*b)[i].unit, (*b)[i].attempt, "w1").ok());
  EXPECT_EQ(led->num_pending(), 3u);
  EXPECT_EQ(led->num_leased(), 0u);
  EXPECT_EQ(led->counters().committed, 4u);
  EXPECT_EQ(led->counters().dropped.at(drop_reason::returned), 12u);
  // A second give-back of the same lease is refused: the attempt is fenced.
  auto twice = led->give_back((*b)[1].unit, (*b)[1].attempt, "w1");
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.err().code, errc::stale_attempt);
  // Nothing is lost: the returned units are leased again, once each.
  auto again = led->acquire_batch("w2", 8);
  ASSERT_TRUE(again.ok());
  std::set<unit_id> units;
  for (const auto& l : *again) units.insert(l.unit);
  EXPECT_EQ(units, (std::set<unit_id>{(*b)[1].unit, (*b)[2].unit, (*b)[3].unit}));
  expect_invariant();
}

TEST_F(ledger_batch, unstarted_batch_expires_whole_at_its_deadline) {
  open_ledger();
  ASSERT_TRUE(led->add_shard("s0").ok());
  add_units(3);
  auto b = led->acquire_batch("w1", 3);
  ASSERT_TRUE(b.ok());
  clk.set(1099);
  EXPECT_TRUE(led->expire_due().empty());
  clk.set(1100);
  EXPECT_EQ(led->expire_due().size(), 3u);
  EXPECT_EQ(led->num_pending(), 3u);
  EXPECT_EQ(led->counters().dropped.at(drop_reason::lease_expired), 12u);
  expect_invariant();
}

TEST_F(ledger_batch, batch_leases_are_journaled_and_expired_by_a_coordinator_restart) {
  moerl::testing::temp_dir dir("ledger-batch");
  auto store = store::local_store::open(dir.path(), /*durable=*/false);
  ASSERT_TRUE(store.ok()) << store.err().to_string();
  opts.group_size = 2;
  {
    auto l = work_ledger::open(opts, clk, store->get());
    ASSERT_TRUE(l.ok()) << l.err().to_string();
    ASSERT_TRUE((*l)->add_shard("s0").ok());
    for (group_id g = 1; g <= 4; ++g) ASSERT_TRUE((*l)->add_unit({g}).ok());
    auto b = (*l)->acquire_batch("w1", 4);
    ASSERT_TRUE(b.ok());
    ASSERT_EQ(b->size(), 4u);
    ASSERT_TRUE((*l)->sync().ok());  // one segment for the whole batch
  }
  recovery_info info;
  auto l = work_ledger::open(opts, clk, store->get(), &info);
  ASSERT_TRUE(l.ok()) << l.err().to_string();
  EXPECT_TRUE(info.recovered);
  EXPECT_EQ(info.leases_expired, 4u);
  EXPECT_EQ((*l)->num_pending(), 4u);
  EXPECT_EQ((*l)->counters().dropped.at(drop_reason::coordinator_restart), 8u);
  EXPECT_TRUE((*l)->check_invariant().ok());
}

}  // namespace
}  // namespace moerl::ledger
