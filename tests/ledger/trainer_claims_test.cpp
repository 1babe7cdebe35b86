// "Claimed before trained" (ledger/LEDGER.md): a trainer claims the groups of a batch in the
// ledger before its step uses them. Reproduces, step by step, the race a SIGSTOPped buffer
// shard made in `moerl up` (duplicated = 8): the shard serves a batch, stalls before its
// `handed` steps reach the ledger, is declared lost, and its groups are re-opened and
// regenerated; the late batch must not be trained as well. And the other way round: a group
// a trainer claimed is its own, so losing its shard does not re-open it (trained once, by the
// trainer's confirmation), unless that trainer is lost too.
#include <gtest/gtest.h>

#include "store/local_store.h"
#include "tests/ledger/handout_rig.h"
#include "tests/support/temp_dir.h"

namespace moerl::ledger {
namespace {

std::vector<bool> all(size_t n, bool v) { return std::vector<bool>(n, v); }

TEST(trainer_claims, a_late_batch_of_a_shard_declared_lost_is_refused_and_trained_once) {
  rig r;
  r.add_second_shard();
  r.commit_unit({1, 2}, 0);
  ASSERT_EQ(r.led->find(1)->shard, "s0");
  const consumer_ref t{"trainer-0", 100};
  ASSERT_TRUE(r.shard->consumer_seen(t).ok());
  // s0 serves the batch, then stalls: its `handed` steps never reached the ledger.
  auto late = r.shard->serve(8, t);
  ASSERT_EQ(late.consumed.size(), 2u);
  // Declared lost (heartbeat silence): its groups are dropped and the unit re-opened.
  auto reopened = r.led->shard_lost("s0");
  ASSERT_TRUE(reopened.ok());
  ASSERT_EQ(reopened->size(), 1u);
  EXPECT_EQ(r.led->counters().dropped.at(drop_reason::shard_lost), 2u * kG);
  r.check();
  // The late batch reaches the trainer; its claim is refused, so its step never uses it.
  auto claim = r.led->claim(t, late.consumed);
  ASSERT_TRUE(claim.ok()) << claim.err().to_string();
  EXPECT_EQ(*claim, all(2, false));
  EXPECT_EQ(r.led->counters().refused_claims, 2u * kG);
  // The stalled shard's own late steps change nothing and count no duplicate.
  for (const auto& c : late.consumed)
    EXPECT_EQ(r.led->record_handout(c).err().code, errc::stale_attempt);
  r.check();
  // The regenerated copy commits on s1 and is trained, once.
  r.commit_next(0);
  ASSERT_EQ(r.led->find(1)->shard, "s1");
  ASSERT_TRUE(r.second->consumer_seen(t).ok());
  auto fresh = r.second->serve(8, t);
  ASSERT_EQ(fresh.consumed.size(), 2u);
  claim = r.led->claim(t, fresh.consumed);
  ASSERT_TRUE(claim.ok());
  EXPECT_EQ(*claim, all(2, true));
  r.record(fresh.consumed);  // the shard's `handed` steps, after the claim: no change
  auto trained = r.second->confirm(t, fresh.batch.batch_id);
  ASSERT_TRUE(trained.ok());
  r.record(*trained);
  const accounting& a = r.led->counters();
  EXPECT_EQ(a.trained, 2u * kG);
  EXPECT_EQ(a.trained, a.committed) << "done: nothing buffered or handed";
  EXPECT_EQ(a.duplicated, 0u);
  EXPECT_EQ(a.dispatched, a.committed + a.dropped_total());
}

TEST(trainer_claims, a_claimed_group_stays_with_its_trainer_when_its_shard_is_lost) {
  rig r;
  r.commit_unit({1, 2}, 0);
  const consumer_ref t{"trainer-0", 100};
  ASSERT_TRUE(r.shard->consumer_seen(t).ok());
  auto b = r.shard->serve(1, t);  // group 1; group 2 stays buffered
  ASSERT_EQ(b.consumed.size(), 1u);
  auto claim = r.led->claim(t, b.consumed);  // before the shard's `handed` step
  ASSERT_TRUE(claim.ok());
  EXPECT_EQ(*claim, all(1, true));
  EXPECT_EQ(r.led->counters().handed, kG);
  EXPECT_EQ(r.led->find(1)->claimed, (std::vector<group_id>{1}));
  r.check();
  // s0 is lost before it could report anything, and before the trainer confirmed.
  auto reopened = r.led->shard_lost("s0");
  ASSERT_TRUE(reopened.ok());
  auto v = r.led->find(1);
  EXPECT_EQ(v->todo, (std::vector<group_id>{2})) << "only the unclaimed group is regenerated";
  EXPECT_EQ(v->handed, (std::vector<group_id>{1}));
  EXPECT_EQ(r.led->counters().dropped.at(drop_reason::shard_lost), kG);
  r.check();
  // A claim again (its reply was lost) is still granted and changes nothing.
  EXPECT_EQ(*r.led->claim(t, b.consumed), all(1, true));
  // The trainer's step made a version with it: the trainer confirms to the ledger directly.
  auto n = r.led->confirm_claimed(t, b.consumed);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 1u);
  EXPECT_EQ(r.led->counters().trained, kG);
  EXPECT_EQ(r.led->counters().handed, 0u);
  EXPECT_EQ(*r.led->confirm_claimed(t, b.consumed), 0u) << "confirmed once";
  r.check();
}

TEST(trainer_claims, a_claim_of_a_lost_trainer_on_a_lost_shard_is_re_opened) {
  rig r;
  r.add_second_shard();
  r.commit_unit({1}, 0);
  const std::string s = r.led->find(1)->shard;
  buffer_shard& from = r.shard_named(s);
  const consumer_ref t{"trainer-0", 100};
  ASSERT_TRUE(from.consumer_seen(t).ok());
  auto b = from.serve(8, t);
  ASSERT_EQ(*r.led->claim(t, b.consumed), all(1, true));
  r.record(b.consumed);
  ASSERT_TRUE(r.led->shard_lost(s).ok());
  EXPECT_EQ(r.led->num_pending(), 0u) << "held by a live trainer";
  // The coordinator declares the trainer lost (bound above its incarnation): nobody holds the
  // group's samples any more, so it is regenerated; the lost trainer's claims are refused.
  auto reopened = r.led->consumer_lost("trainer-0", 150);
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ(*reopened, (std::vector<unit_id>{1}));
  EXPECT_EQ(r.led->counters().dropped.at(drop_reason::shard_lost), kG);
  EXPECT_EQ(*r.led->confirm_claimed(t, b.consumed), 0u) << "a fenced trainer confirms nothing";
  EXPECT_EQ(*r.led->claim(t, b.consumed), all(1, false));
  r.check();
  r.commit_next(0);
  const consumer_ref next{"trainer-0", 200};
  buffer_shard& to = r.shard_named(r.led->find(1)->shard);
  ASSERT_TRUE(to.consumer_seen(next).ok());
  auto b2 = to.serve(8, next);
  ASSERT_EQ(*r.led->claim(next, b2.consumed), all(1, true));
  auto trained = to.confirm(next, b2.batch.batch_id);
  ASSERT_TRUE(trained.ok());
  r.record(b2.consumed);
  r.record(*trained);
  EXPECT_EQ(r.led->counters().trained, kG);
  EXPECT_EQ(r.led->counters().trained, r.led->counters().committed);
}

TEST(trainer_claims, a_shard_recreated_under_the_same_name_does_not_hold_old_claims) {
  // buffer-0 is a StatefulSet: its replacement registers under the same name, empty. A group
  // claimed from the lost process is still only the trainer's: when the trainer is lost too,
  // it is re-opened, and a late `returned` of the old process is refused.
  rig r;
  r.commit_unit({1}, 0);
  const consumer_ref t{"trainer-0", 100};
  ASSERT_TRUE(r.shard->consumer_seen(t).ok());
  auto b = r.shard->serve(8, t);
  ASSERT_EQ(*r.led->claim(t, b.consumed), all(1, true));
  r.record(b.consumed);
  ASSERT_TRUE(r.led->shard_lost("s0").ok());
  ASSERT_TRUE(r.led->add_shard("s0").ok());              // recreated
  auto back = r.shard->consumer_lost("trainer-0", 150);  // the old process, running late
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(r.led->record_handout(back[0]).err().code, errc::stale_attempt);
  auto reopened = r.led->consumer_lost("trainer-0", 150);
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ(*reopened, (std::vector<unit_id>{1}));
  EXPECT_EQ(r.led->counters().handed, 0u);
  r.check();
}

TEST(trainer_claims, a_successors_claim_arriving_before_the_shards_steps_takes_the_group) {
  // Incarnation 100 got a batch and died before claiming it; 200 asks, the shard gives the
  // group back and serves it to 200, whose claim reaches the ledger before any of the shard's
  // steps (handed to 100, returned, handed to 200). Every step is then accepted, none counts
  // twice.
  rig r;
  r.commit_unit({1}, 0);
  const consumer_ref dead{"trainer-0", 100}, next{"trainer-0", 200};
  ASSERT_TRUE(r.shard->consumer_seen(dead).ok());
  auto b1 = r.shard->serve(8, dead);
  auto released = r.shard->consumer_seen(next);
  ASSERT_TRUE(released.ok());
  ASSERT_EQ(released->size(), 1u);
  auto b2 = r.shard->serve(8, next);
  ASSERT_EQ(b2.consumed.size(), 1u);
  ASSERT_EQ(*r.led->claim(next, b2.consumed), all(1, true));
  r.record(b1.consumed);
  r.record(*released);
  r.record(b2.consumed);
  EXPECT_EQ(r.led->counters().handed, kG);
  EXPECT_EQ(*r.led->claim(dead, b1.consumed), all(1, false)) << "the predecessor is fenced";
  auto trained = r.shard->confirm(next, b2.batch.batch_id);
  ASSERT_TRUE(trained.ok());
  r.record(*trained);
  EXPECT_EQ(r.led->counters().trained, kG);
  EXPECT_EQ(r.led->counters().handed, 0u);
  EXPECT_EQ(r.led->counters().duplicated, 0u);
}

TEST(trainer_claims, a_claim_of_an_incarnation_the_coordinator_declared_lost_is_refused) {
  rig r;
  r.commit_unit({1}, 0);
  const consumer_ref t{"trainer-0", 100};
  ASSERT_TRUE(r.shard->consumer_seen(t).ok());
  auto b = r.shard->serve(8, t);
  r.record(b.consumed);
  // Declared lost while its batch was on the way (a frozen trainer): the shard takes the group
  // back, and the trainer's late claim is refused, so a woken trainer never trains it.
  ASSERT_TRUE(r.led->consumer_lost("trainer-0", 150).ok());
  r.record(r.shard->consumer_lost("trainer-0", 150));
  EXPECT_EQ(*r.led->claim(t, b.consumed), all(1, false));
  EXPECT_EQ(r.led->counters().buffered(), kG);
  EXPECT_EQ(r.led->counters().refused_claims, kG);
  r.check();
  EXPECT_EQ(r.led->claim({"trainer-0", 0}, b.consumed).err().code, errc::invalid_argument);
}

TEST(trainer_claims, claims_survive_a_coordinator_restart) {
  moerl::testing::temp_dir dir("claims");
  auto store = store::local_store::open(dir.path(), /*durable=*/false);
  ASSERT_TRUE(store.ok()) << store.err().to_string();
  const consumer_ref t{"trainer-0", 100};
  std::vector<consumption> held;
  {
    rig r(store->get());
    r.commit_unit({1, 2}, 0);
    ASSERT_TRUE(r.shard->consumer_seen(t).ok());
    auto b = r.shard->serve(1, t);
    held = b.consumed;
    ASSERT_EQ(*r.led->claim(t, held), all(1, true));
    auto refused = r.led->claim({"trainer-0", 50}, held);  // an older incarnation: fenced
    EXPECT_EQ(*refused, all(1, false));
    // Past snapshot_every: the claims are in a snapshot and in the journal after it.
    ASSERT_TRUE(r.led->sync().ok());
  }
  manual_clock clk{0};
  ledger_options lopts;
  lopts.group_size = kG;
  lopts.max_groups_per_unit = 2;
  lopts.snapshot_every = 4;
  auto led = work_ledger::open(lopts, clk, store->get());
  ASSERT_TRUE(led.ok()) << led.err().to_string();
  EXPECT_EQ((*led)->find(1)->claimed, (std::vector<group_id>{1}));
  EXPECT_EQ((*led)->counters().refused_claims, kG);
  ASSERT_TRUE((*led)->check_invariant().ok());
  // Its shard did not come back after the restart: the claimed group stays the trainer's.
  ASSERT_TRUE((*led)->shard_lost("s0").ok());
  EXPECT_EQ((*led)->find(1)->todo, (std::vector<group_id>{2}));
  EXPECT_EQ(*(*led)->confirm_claimed(t, held), 1u);
  EXPECT_EQ(*(*led)->claim({"trainer-0", 50}, held), all(1, false)) << "the floor survived";
  ASSERT_TRUE((*led)->check_invariant().ok());
}

}  // namespace
}  // namespace moerl::ledger
