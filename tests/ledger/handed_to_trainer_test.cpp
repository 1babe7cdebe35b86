// "Handed to a trainer" (ledger/LEDGER.md): a real buffer shard and a real work ledger wired
// together, driven step by step. A group a shard serves to a confirming trainer is handed
// until the trainer confirms it; when the trainer's incarnation is lost the shard serves it
// to the successor (or drops it as trainer_lost_stale when it became too stale), a late
// confirmation from the lost incarnation is fenced, and after every step
//   committed = trained + handed + buffered
// holds, in the ledger's counters and recomputed from its units.
#include <gtest/gtest.h>

#include "store/local_store.h"
#include "tests/ledger/handout_rig.h"
#include "tests/support/temp_dir.h"

namespace moerl::ledger {
namespace {

TEST(handed_to_trainer, a_served_group_is_handed_until_its_trainer_confirms_it) {
  rig r;
  r.commit_unit({1, 2}, 0);
  const consumer_ref t{"trainer-0", 100};
  ASSERT_TRUE(r.shard->consumer_seen(t).ok());
  auto b = r.shard->serve(8, t);
  ASSERT_EQ(b.consumed.size(), 2u);
  EXPECT_EQ(b.consumed[0].step, handout_step::handed);
  r.record(b.consumed);
  EXPECT_EQ(r.led->counters().handed, 2u * kG);
  EXPECT_EQ(r.led->counters().trained, 0u);
  EXPECT_EQ(r.shard->num_handed_groups(), 2u);
  EXPECT_EQ(r.shard->stats().resident_samples, 2u * kG) << "kept until confirmed";

  auto trained = r.shard->confirm(t, b.batch.batch_id);
  ASSERT_TRUE(trained.ok()) << trained.err().to_string();
  ASSERT_EQ(trained->size(), 2u);
  EXPECT_EQ((*trained)[0].step, handout_step::trained);
  r.record(*trained);
  EXPECT_EQ(r.led->counters().trained, 2u * kG);
  EXPECT_EQ(r.led->counters().handed, 0u);
  EXPECT_EQ(r.shard->stats().resident_samples, 0u);
  // Confirmed twice: the shard refuses, the ledger takes the re-sent step once.
  EXPECT_EQ(r.shard->confirm(t, b.batch.batch_id).err().code, errc::stale_attempt);
  r.record(*trained);
  EXPECT_EQ(r.led->counters().trained, 2u * kG);
}

TEST(handed_to_trainer,
     a_lost_incarnations_groups_go_to_its_successor_and_its_late_confirm_is_fenced) {
  rig r;
  r.commit_unit({1, 2}, 0);
  r.commit_unit({3}, 0);
  const consumer_ref dead{"trainer-0", 100}, next{"trainer-0", 200};
  ASSERT_TRUE(r.shard->consumer_seen(dead).ok());
  auto first = r.shard->serve(2, dead);  // groups 1, 2 handed to the incarnation that dies
  r.record(first.consumed);
  EXPECT_EQ(r.shard->num_ready_groups(), 1u);

  // The recreated trainer's first request: the predecessor is lost, its groups come back.
  auto released = r.shard->consumer_seen(next);
  ASSERT_TRUE(released.ok());
  ASSERT_EQ(released->size(), 2u);
  for (const auto& c : *released) EXPECT_EQ(c.step, handout_step::returned);
  r.record(*released);
  EXPECT_EQ(r.led->counters().handed, 0u);
  EXPECT_EQ(r.led->counters().buffered(), 3u * kG);
  EXPECT_EQ(r.shard->stats().reserved_groups, 2u);

  auto again = r.shard->serve(8, next);
  ASSERT_EQ(again.consumed.size(), 3u);
  EXPECT_EQ(again.consumed[0].group, 1u) << "served again first, oldest first";
  EXPECT_EQ(again.consumed[1].group, 2u);
  EXPECT_NE(again.consumed[0].handout, first.consumed[0].handout);
  r.record(again.consumed);

  // The lost incarnation confirms late: the shard fences it, and so would the ledger.
  EXPECT_EQ(r.shard->confirm(dead, first.batch.batch_id).err().code, errc::stale_attempt);
  auto late = first.consumed[0];
  late.step = handout_step::trained;
  EXPECT_EQ(r.led->record_handout(late).err().code, errc::stale_attempt);
  EXPECT_EQ(r.shard->consumer_seen(dead).err().code, errc::stale_attempt);
  EXPECT_EQ(r.shard->stats().fenced_consumers, 2u);
  r.check();
  EXPECT_EQ(r.led->counters().trained, 0u);

  auto trained = r.shard->confirm(next, again.batch.batch_id);
  ASSERT_TRUE(trained.ok());
  r.record(*trained);
  const accounting& a = r.led->counters();
  EXPECT_EQ(a.trained, a.committed) << "every group trained once, by the successor";
  EXPECT_EQ(a.committed, 3u * kG);
}

TEST(handed_to_trainer, a_group_too_stale_when_its_trainer_is_lost_is_dropped_with_the_reason) {
  rig r;
  r.commit_unit({1}, 0);  // made at version 0
  r.commit_unit({2}, 5);  // made at version 5
  const consumer_ref dead{"trainer-0", 7};
  ASSERT_TRUE(r.shard->consumer_seen(dead).ok());
  auto b = r.shard->serve(8, dead);
  ASSERT_EQ(b.consumed.size(), 2u);
  r.record(b.consumed);
  r.shard->set_policy_version(5);  // 0 + max_staleness 1 < 5: group 1 is too old now
  auto released = r.shard->consumer_lost("trainer-0", 7);
  ASSERT_EQ(released.size(), 2u);
  EXPECT_EQ(released[0].step, handout_step::dropped);
  EXPECT_EQ(released[0].group, 1u);
  EXPECT_EQ(released[1].step, handout_step::returned);
  r.record(released);
  const accounting& a = r.led->counters();
  EXPECT_EQ(a.dropped.at(drop_reason::trainer_lost_stale), kG);
  EXPECT_EQ(a.committed, kG);
  EXPECT_EQ(a.buffered(), kG);
  EXPECT_EQ(a.dispatched, a.committed + a.in_flight + a.dropped_total());
  EXPECT_EQ(r.shard->stats().trainer_lost_stale, 1u);
  EXPECT_EQ(r.shard->stats().resident_samples, kG);
  EXPECT_EQ(r.shard->num_ready_groups(), 1u);
}

TEST(handed_to_trainer,
     a_consumer_declared_lost_by_a_bound_is_released_and_fenced_its_successor_not) {
  // The coordinator declares trainer-0 lost with a bound (wall-clock µs at the declaration)
  // that no incarnation has: what incarnation 7 held goes back, a late request or
  // confirmation of incarnation 7 gets nothing, and a successor above the bound is served.
  rig r;
  r.commit_unit({1}, 0);
  const consumer_ref dead{"trainer-0", 7};
  ASSERT_TRUE(r.shard->consumer_seen(dead).ok());
  auto b = r.shard->serve(8, dead);
  ASSERT_EQ(b.consumed.size(), 1u);
  r.record(b.consumed);
  auto released = r.shard->consumer_lost("trainer-0", 100);
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].step, handout_step::returned);
  r.record(released);
  EXPECT_EQ(r.led->counters().handed, 0u);
  EXPECT_EQ(r.led->counters().buffered(), kG);
  EXPECT_EQ(r.shard->consumer_seen(dead).err().code, errc::stale_attempt);
  EXPECT_EQ(r.shard->confirm(dead, b.batch.batch_id).err().code, errc::stale_attempt);
  const consumer_ref next{"trainer-0", 101};
  auto again = r.shard->consumer_seen(next);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->empty());
  auto b2 = r.shard->serve(8, next);
  ASSERT_EQ(b2.consumed.size(), 1u);
  r.record(b2.consumed);
  auto trained = r.shard->confirm(next, b2.batch.batch_id);
  ASSERT_TRUE(trained.ok());
  r.record(*trained);
  EXPECT_EQ(r.led->counters().trained, kG);
  EXPECT_EQ(r.led->counters().duplicated, 0u);
  EXPECT_TRUE(r.led->check_invariant());
}

TEST(handed_to_trainer, a_consumer_that_never_confirms_has_its_groups_trained_as_they_leave) {
  rig r;
  r.commit_unit({1}, 0);
  auto b = r.shard->serve(8);  // incarnation 0
  ASSERT_EQ(b.consumed.size(), 1u);
  EXPECT_EQ(b.consumed[0].step, handout_step::consumed);
  r.record(b.consumed);
  EXPECT_EQ(r.led->counters().trained, kG);
  EXPECT_EQ(r.shard->stats().resident_samples, 0u);
}

TEST(handed_to_trainer, handed_groups_survive_a_coordinator_restart) {
  moerl::testing::temp_dir dir("handed");
  auto store = store::local_store::open(dir.path(), /*durable=*/false);
  ASSERT_TRUE(store.ok()) << store.err().to_string();
  consumption kept;
  {
    rig r(store->get());
    r.commit_unit({1, 2}, 0);
    const consumer_ref t{"trainer-0", 9};
    ASSERT_TRUE(r.shard->consumer_seen(t).ok());
    auto b = r.shard->serve(8, t);
    r.record(b.consumed);
    kept = b.consumed[1];
    ASSERT_TRUE(r.led->sync().ok());  // snapshot_every 4: the snapshot holds the handed groups
  }
  manual_clock clk{0};
  ledger_options o;
  o.group_size = kG;
  o.max_groups_per_unit = 2;
  o.snapshot_every = 4;
  recovery_info info;
  auto led = work_ledger::open(o, clk, store->get(), &info);
  ASSERT_TRUE(led.ok()) << led.err().to_string();
  EXPECT_GT(info.snapshot_seq, 0u);
  EXPECT_EQ((*led)->counters().handed, 2u * kG);
  ASSERT_TRUE((*led)->check_invariant().ok()) << (*led)->check_invariant().err().to_string();
  kept.step = handout_step::trained;
  ASSERT_TRUE((*led)->record_handout(kept).ok());
  EXPECT_EQ((*led)->counters().trained, kG);
  EXPECT_EQ((*led)->counters().handed, kG);
  EXPECT_EQ((*led)->find(1)->handed, (std::vector<group_id>{1}));
}

}  // namespace
}  // namespace moerl::ledger

namespace moerl::ledger {

// A batch whose send failed never reached the trainer: it is taken back (returned) and served
// again, not left handed to a trainer that will never confirm or release it.
TEST(handed_to_trainer, an_undelivered_batch_is_taken_back_and_served_again) {
  rig r;
  r.commit_unit({1, 2}, 0);
  const consumer_ref t{"trainer-0", 100};
  ASSERT_TRUE(r.shard->consumer_seen(t).ok());
  auto b = r.shard->serve(8, t);
  r.record(b.consumed);
  auto back = r.shard->undelivered(b.batch.batch_id);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].step, handout_step::returned);
  r.record(back);
  EXPECT_EQ(r.led->counters().handed, 0u);
  EXPECT_EQ(r.shard->num_handed_groups(), 0u);
  EXPECT_TRUE(r.shard->undelivered(b.batch.batch_id).empty()) << "taken back once";
  auto again = r.shard->serve(8, t);
  ASSERT_EQ(again.consumed.size(), 2u);
  r.record(again.consumed);
  auto trained = r.shard->confirm(t, again.batch.batch_id);
  ASSERT_TRUE(trained.ok()) << trained.err().to_string();
  r.record(*trained);
  EXPECT_EQ(r.led->counters().trained, 2u * kG);
}

}  // namespace moerl::ledger
