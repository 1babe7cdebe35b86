// A coordinator crash and restart against the real local-directory object store: the
// ledger is rebuilt from snapshot + journal, open leases are expired and fenced by the
// new epoch, a torn last journal record is ignored, damage elsewhere is an error.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <thread>

#include "ledger/work_ledger.h"
#include "store/local_store.h"
#include "tests/support/temp_dir.h"

namespace moerl::ledger {
namespace {

class ledger_recovery : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::local_store::open(dir.path(), /*durable=*/false);
    ASSERT_TRUE(s.ok()) << s.err().to_string();
    st = std::move(*s);
    opts.lease_timeout_ms = 1000;
    opts.group_size = 2;
    opts.max_groups_per_unit = 2;
    opts.snapshot_every = 1'000'000;  // tests that want snapshots lower it
  }

  std::unique_ptr<work_ledger> open(recovery_info* info = nullptr) {
    auto l = work_ledger::open(opts, clk, st.get(), info);
    EXPECT_TRUE(l.ok()) << l.err().to_string();
    return l.ok() ? std::move(*l) : nullptr;
  }
  // Everything observable about a ledger, for before/after comparisons.
  static std::string dump(const work_ledger& l) {
    std::string out = l.counters().to_json().dump() + "\n";
    for (unit_id u = 1; u <= l.num_units(); ++u) {
      auto v = l.find(u);
      out += std::to_string(u) + " " + unit_state_name(v->state) + " a" +
             std::to_string(v->attempt) + " " + v->worker + " " + v->shard + " todo" +
             std::to_string(v->todo.size()) + " c" + std::to_string(v->committed.size()) + " t" +
             std::to_string(v->trained.size()) + "\n";
    }
    return out;
  }
  // A worker that finishes a unit: report, shard ack, and optionally training.
  static void finish(work_ledger& l, const lease& ls, bool train) {
    ASSERT_TRUE(l.report(ls.unit, ls.attempt, ls.worker, ls.num_samples()).ok());
    ASSERT_TRUE(l.record_ack({ls.unit, ls.attempt, ls.shard, ls.groups, {}}).ok());
    if (train) {
      for (auto g : ls.groups) ASSERT_TRUE(l.record_consumed({ls.unit, ls.attempt, g, 2}).ok());
    }
  }

  moerl::testing::temp_dir dir{"ledger-recovery"};  // before `st`: removed after it closes
  std::unique_ptr<store::object_store> st;
  ledger_options opts;
  manual_clock clk{0};
};

TEST_F(ledger_recovery, a_fresh_store_starts_epoch_one_and_a_restart_bumps_it) {
  recovery_info info;
  auto l = open(&info);
  EXPECT_FALSE(info.recovered);
  EXPECT_EQ(info.epoch, 1u);
  l.reset();  // crash
  auto l2 = open(&info);
  EXPECT_TRUE(info.recovered);
  EXPECT_EQ(info.epoch, 2u);
  EXPECT_EQ(l2->epoch(), 2u);
}

TEST_F(ledger_recovery, state_survives_a_crash_and_open_leases_expire_fenced_by_the_new_epoch) {
  auto l = open();
  ASSERT_TRUE(l->add_shard("s0").ok());
  for (group_id g = 1; g <= 4; ++g) ASSERT_TRUE(l->add_unit({g * 10, g * 10 + 1}).ok());
  lease a = *l->acquire("w1");
  lease b = *l->acquire("w2");
  lease c = *l->acquire("w3");
  finish(*l, a, /*train=*/true);
  finish(*l, b, /*train=*/false);
  ASSERT_TRUE(l->report(c.unit, c.attempt, "w3", 4).ok());  // reported, ack never came
  ASSERT_TRUE(l->sync().ok());
  std::string before = dump(*l);
  l.reset();  // crash

  recovery_info info;
  auto r = open(&info);
  EXPECT_TRUE(info.recovered);
  EXPECT_EQ(info.leases_expired, 1u);
  EXPECT_EQ(info.torn_bytes, 0u);
  EXPECT_TRUE(r->check_invariant().ok()) << r->check_invariant().err().to_string();
  EXPECT_EQ(r->find(a.unit)->state, unit_state::committed);
  EXPECT_EQ(r->find(a.unit)->trained.size(), 2u);
  EXPECT_EQ(r->find(b.unit)->state, unit_state::committed);
  EXPECT_EQ(r->find(c.unit)->state, unit_state::pending);
  EXPECT_EQ(r->counters().dropped.at("coordinator_restart"), 4u);
  EXPECT_EQ(r->counters().committed, 8u);
  EXPECT_EQ(r->counters().trained, 4u);
  // The old holder of c is fenced; the unit is leased again under epoch 2.
  EXPECT_EQ(r->record_ack({c.unit, c.attempt, "s0", c.groups, {}}).err().code, errc::stale_attempt);
  // The events say: fence c's attempt; b's commit again (a was fully trained).
  auto ev = r->take_events();
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].what, ledger_event::kind::attempt_fenced);
  EXPECT_EQ(ev[0].unit, c.unit);
  EXPECT_EQ(ev[1].what, ledger_event::kind::unit_committed);
  EXPECT_EQ(ev[1].unit, b.unit);
  std::vector<unit_id> leased;
  while (true) {
    auto n = r->acquire("w9");
    if (!n) break;
    EXPECT_EQ(attempt_epoch(n->attempt), 2u);
    leased.push_back(n->unit);
  }
  EXPECT_EQ(leased.size(), 2u);  // c and the never-leased fourth unit
  (void)before;
}

TEST_F(ledger_recovery, a_lease_whose_record_never_became_durable_is_still_fenced) {
  auto l = open();
  ASSERT_TRUE(l->add_shard("s0").ok());
  ASSERT_TRUE(l->add_unit({1}).ok());
  ASSERT_TRUE(l->sync().ok());
  lease lost = *l->acquire("w1");  // no sync: the crash eats the record
  EXPECT_TRUE(l->take_events().empty()) << "events wait for the journal";
  l.reset();
  auto r = open();
  EXPECT_EQ(r->find(lost.unit)->state, unit_state::pending);
  lease fresh = *r->acquire("w2");
  EXPECT_GT(fresh.attempt, lost.attempt);
  EXPECT_EQ(r->report(lost.unit, lost.attempt, "w1", 2).err().code, errc::stale_attempt);
  EXPECT_TRUE(r->check_invariant().ok());
}

TEST_F(ledger_recovery, a_torn_last_journal_record_is_ignored_and_the_journal_repaired) {
  auto l = open();
  ASSERT_TRUE(l->add_shard("s0").ok());
  ASSERT_TRUE(l->add_unit({1}).ok());
  ASSERT_TRUE(l->add_unit({2}).ok());
  ASSERT_TRUE(l->sync().ok());
  lease a = *l->acquire("w1");
  finish(*l, a, false);
  ASSERT_TRUE(l->sync().ok());
  l.reset();
  // Cut the last segment in the middle of its last record, as a crash mid-write would.
  auto keys = *st->list("ledger/journal/");
  ASSERT_GE(keys.size(), 1u);
  std::string last = *st->get(keys.back());
  ASSERT_TRUE(st->put(keys.back(), last.substr(0, last.size() - 5)).ok());

  recovery_info info;
  auto r = open(&info);
  EXPECT_GT(info.torn_bytes, 0u);
  // The torn record was the ack: the unit was reported but not committed, and its lease
  // expired on recovery.
  EXPECT_EQ(r->find(a.unit)->state, unit_state::pending);
  EXPECT_EQ(r->counters().committed, 0u);
  EXPECT_TRUE(r->check_invariant().ok()) << r->check_invariant().err().to_string();
  ASSERT_TRUE(r->add_unit({3}).ok());
  ASSERT_TRUE(r->sync().ok());
  r.reset();
  // The repaired journal recovers again without complaint.
  recovery_info info2;
  auto r2 = open(&info2);
  EXPECT_EQ(info2.torn_bytes, 0u);
  EXPECT_EQ(r2->num_units(), 3u);
  EXPECT_EQ(r2->epoch(), 3u);
}

// The coordinator journals a consumption and dies before its reply reaches the shard; the
// shard sends it again to the recovered coordinator. Through the journal and through a
// snapshot, the re-sent hand-out is recognised and not counted twice.
TEST_F(ledger_recovery, a_consumption_re_sent_after_a_restart_is_not_a_duplicate) {
  for (bool snapshot : {false, true}) {
    SCOPED_TRACE(snapshot ? "through a snapshot" : "through the journal");
    auto old_keys = st->list("ledger/");
    ASSERT_TRUE(old_keys.ok());
    for (const auto& k : *old_keys) ASSERT_TRUE(st->remove(k).ok());  // a fresh ledger
    opts.snapshot_every = snapshot ? 1 : 1'000'000;
    auto l = open();
    ASSERT_TRUE(l->add_shard("s0").ok());
    ASSERT_TRUE(l->add_unit({1, 2}).ok());
    lease a = *l->acquire("w1");
    finish(*l, a, /*train=*/false);
    ASSERT_TRUE(l->record_consumed({a.unit, a.attempt, 1, 2, /*handout=*/5}).ok());
    ASSERT_TRUE(l->sync().ok());
    l.reset();  // crash before the reply
    auto r = open();
    ASSERT_TRUE(r->record_consumed({a.unit, a.attempt, 1, 2, 5}).ok());
    EXPECT_EQ(r->counters().trained, 2u);
    EXPECT_EQ(r->counters().duplicated, 0u);
    EXPECT_TRUE(r->check_invariant().ok());
    ASSERT_TRUE(r->record_consumed({a.unit, a.attempt, 2, 2, 6}).ok());  // the other group, fresh
    EXPECT_EQ(r->record_consumed({a.unit, a.attempt, 1, 2, 9}).err().code, errc::duplicate);
  }
}

TEST_F(ledger_recovery, a_crash_at_any_byte_of_the_last_segment_recovers_a_consistent_prefix) {
  auto l = open();
  ASSERT_TRUE(l->add_shard("s0").ok());
  ASSERT_TRUE(l->add_unit({1, 2}).ok());
  ASSERT_TRUE(l->add_unit({3}).ok());
  ASSERT_TRUE(l->sync().ok());
  // One segment holding a lease, a report, an ack, a consumption and a give-back.
  lease a = *l->acquire("w1");
  finish(*l, a, /*train=*/false);
  ASSERT_TRUE(l->record_consumed({a.unit, a.attempt, 1, 2}).ok());
  lease b = *l->acquire("w2");
  ASSERT_TRUE(l->give_back(b.unit, b.attempt, "w2").ok());
  ASSERT_TRUE(l->sync().ok());
  l.reset();
  auto keys = *st->list("ledger/journal/");
  const std::string last_key = keys.back();
  const std::string full = *st->get(last_key);
  uint64_t last_trained = 0;
  for (size_t cut = 0; cut <= full.size(); ++cut) {
    // Start every trial from the same journal: drop what earlier recoveries appended.
    auto now_keys = st->list("ledger/journal/");
    ASSERT_TRUE(now_keys.ok());
    for (const auto& k : *now_keys) {
      if (k > last_key) {
        ASSERT_TRUE(st->remove(k).ok());
      }
    }
    ASSERT_TRUE(st->put(last_key, full.substr(0, cut)).ok());
    recovery_info info;
    auto r = work_ledger::open(opts, clk, st.get(), &info);
    ASSERT_TRUE(r.ok()) << "cut at " << cut << ": " << r.err().to_string();
    auto inv = (*r)->check_invariant();
    ASSERT_TRUE(inv.ok()) << "cut at " << cut << ": " << inv.err().to_string();
    EXPECT_EQ((*r)->counters().in_flight, 0u) << "open leases expire on recovery";
    // A longer journal never knows less.
    EXPECT_GE((*r)->counters().trained, last_trained) << "cut at " << cut;
    last_trained = (*r)->counters().trained;
  }
  EXPECT_EQ(last_trained, 2u);
}

// Every open starts a segment (appends go to it until the next snapshot). Damage to an
// acknowledged record of the first leaves a gap before the second: an error naming both.
TEST_F(ledger_recovery, damage_that_loses_acknowledged_records_is_an_error_naming_the_segment) {
  for (group_id g : {1, 2}) {
    auto l = open();
    ASSERT_TRUE(l->add_unit({g}).ok());
    ASSERT_TRUE(l->sync().ok());
  }
  auto keys = *st->list("ledger/journal/");
  ASSERT_EQ(keys.size(), 2u);
  std::string first = *st->get(keys[0]);
  first[first.size() - 1] ^= 0x5a;  // flip bits in its last record: CRC mismatch
  ASSERT_TRUE(st->put(keys[0], first).ok());
  auto r = work_ledger::open(opts, clk, st.get());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::io_error);
  EXPECT_NE(r.err().message.find(keys[0]), std::string::npos) << r.err().message;
  EXPECT_NE(r.err().message.find(keys[1]), std::string::npos) << r.err().message;
  EXPECT_EQ(*st->get(keys[0]), first) << "a journal that does not recover is left as found";
}

// A store whose next append writes only part of its bytes and fails, leaving them (as a
// file system that could not cut them back would).
class tearing_store final : public store::object_store {
 public:
  explicit tearing_store(store::object_store& inner) : inner_(inner) {}
  bool tear_next_append = false;
  status put(const std::string& k, const std::string& b) override { return inner_.put(k, b); }
  result<std::string> get(const std::string& k) const override { return inner_.get(k); }
  result<std::vector<std::string>> list(const std::string& p) const override {
    return inner_.list(p);
  }
  status remove(const std::string& k) override { return inner_.remove(k); }
  bool supports_append() const override { return true; }
  status append(const std::string& k, const std::string& b) override {
    if (!tear_next_append) return inner_.append(k, b);
    tear_next_append = false;
    (void)inner_.append(k, b.substr(0, b.size() / 2));
    return error(errc::io_error, "append to " + k + ": no space left on device (test)");
  }
  std::string describe() const override { return "tearing:" + inner_.describe(); }

 private:
  store::object_store& inner_;
};

TEST_F(ledger_recovery, a_failed_append_leaves_torn_bytes_and_the_retried_records_recover) {
  tearing_store tearing(*st);
  for (bool first_write_of_a_segment : {false, true}) {
    SCOPED_TRACE(first_write_of_a_segment ? "torn segment start" : "torn segment middle");
    auto old_keys = st->list("ledger/");
    ASSERT_TRUE(old_keys.ok());
    for (const auto& k : *old_keys) ASSERT_TRUE(st->remove(k).ok());  // a fresh ledger
    opts.snapshot_every = first_write_of_a_segment ? 3 : 1'000'000;
    auto l = work_ledger::open(opts, clk, &tearing);
    ASSERT_TRUE(l.ok()) << l.err().to_string();
    ASSERT_TRUE((*l)->add_shard("s0").ok());
    ASSERT_TRUE((*l)->add_unit({1, 2}).ok());
    ASSERT_TRUE((*l)->sync().ok());  // with snapshot_every 3: a snapshot, the segment closed
    ASSERT_TRUE((*l)->add_unit({3, 4}).ok());
    tearing.tear_next_append = true;
    auto failed = (*l)->sync();
    ASSERT_FALSE(failed.ok());
    EXPECT_NE(failed.err().message.find("no space left"), std::string::npos);
    ASSERT_TRUE((*l)->sync().ok()) << "the retry writes the same records again";
    lease a = *(*l)->acquire("w1");
    finish(**l, a, /*train=*/true);
    ASSERT_TRUE((*l)->sync().ok());
    std::string before = dump(**l);
    l->reset();

    recovery_info info;
    auto r = open(&info);
    ASSERT_NE(r, nullptr);
    // A torn first write is replaced whole by the retry (same first record, same key); a
    // torn append in the middle of a segment stays until recovery cuts it.
    if (first_write_of_a_segment)
      EXPECT_EQ(info.torn_bytes, 0u);
    else
      EXPECT_GT(info.torn_bytes, 0u);
    EXPECT_EQ(dump(*r), before);
    EXPECT_TRUE(r->check_invariant().ok()) << r->check_invariant().err().to_string();
    r.reset();
    recovery_info again;
    ASSERT_NE(open(&again), nullptr);
    EXPECT_EQ(again.torn_bytes, 0u) << "the torn bytes were cut at the first recovery";
  }
}

// One segment per snapshot period on a store with appends: the journal does not create a
// file per sync (a file per group commit cost the coordinator most of its CPU late in a run).
TEST_F(ledger_recovery, syncs_append_to_one_segment_until_the_next_snapshot) {
  opts.snapshot_every = 50;
  auto l = open();
  ASSERT_TRUE(l->add_shard("s0").ok());
  for (group_id g = 1; g <= 20; ++g) {
    ASSERT_TRUE(l->add_unit({g}).ok());
    ASSERT_TRUE(l->sync().ok());
  }
  auto segs = st->list("ledger/journal/");
  ASSERT_TRUE(segs.ok());
  EXPECT_EQ(segs->size(), 1u);
  for (group_id g = 21; g <= 60; ++g) {
    ASSERT_TRUE(l->add_unit({g}).ok());
    ASSERT_TRUE(l->sync().ok());
  }
  auto snaps = st->list("ledger/snapshot/");
  segs = st->list("ledger/journal/");
  ASSERT_TRUE(snaps.ok() && segs.ok());
  EXPECT_EQ(snaps->size(), 1u);
  EXPECT_EQ(segs->size(), 1u) << "the covered segment went";
  std::string before = dump(*l);
  l.reset();
  EXPECT_EQ(dump(*open()), before);
}

TEST_F(ledger_recovery, snapshot_plus_journal_rebuild_the_same_ledger_and_old_segments_go) {
  opts.snapshot_every = 7;
  auto l = open();
  ASSERT_TRUE(l->add_shard("s0").ok());
  ASSERT_TRUE(l->add_shard("s1").ok());
  // A deterministic mix of every operation, syncing after each step.
  std::mt19937 rng(42);
  for (group_id g = 1; g <= 30; ++g) ASSERT_TRUE(l->add_unit({g, g + 1000}).ok());
  ASSERT_TRUE(l->sync().ok());
  for (int step = 0; step < 60; ++step) {
    auto ls = l->acquire("w" + std::to_string(step % 3));
    if (!ls) break;
    switch (rng() % 4) {
      case 0: finish(*l, *ls, true); break;
      case 1: finish(*l, *ls, false); break;
      case 2: ASSERT_TRUE(l->give_back(ls->unit, ls->attempt, ls->worker).ok()); break;
      case 3:
        clk.advance(2000);
        l->expire_due();
        break;
    }
    ASSERT_TRUE(l->sync().ok());
  }
  ASSERT_TRUE(l->check_invariant().ok());
  // Open no lease at the crash, so recovery changes nothing but the epoch.
  std::string before = dump(*l);
  l.reset();
  auto segs = *st->list("ledger/journal/");
  auto snaps = *st->list("ledger/snapshot/");
  EXPECT_EQ(snaps.size(), 1u);
  EXPECT_LT(segs.size(), 10u) << "segments covered by the snapshot are removed";

  recovery_info info;
  auto r = open(&info);
  EXPECT_GT(info.snapshot_seq, 0u);
  EXPECT_LT(info.records_replayed, 7u + 1);
  EXPECT_EQ(dump(*r), before);
  EXPECT_TRUE(r->check_invariant().ok());
}

TEST_F(ledger_recovery, a_foreign_or_garbage_snapshot_is_refused_with_its_key) {
  ASSERT_TRUE(st->put("ledger/snapshot/0000000000000009", "not a snapshot").ok());
  auto r = work_ledger::open(opts, clk, st.get());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.err().message.find("0000000000000009"), std::string::npos) << r.err().message;
}

// The coordinator writes each batch off its thread (work_ledger::begin_sync / write_sync /
// end_sync) while requests keep changing the ledger: the records added meanwhile wait for
// the next batch, a batch's events are released only by its own end_sync, and one batch at a
// time.
TEST_F(ledger_recovery, a_batch_written_while_the_ledger_moves_on_releases_only_its_own_events) {
  auto l = open();
  ASSERT_TRUE(l->add_shard("s0").ok());
  for (group_id g = 1; g <= 3; ++g) ASSERT_TRUE(l->add_unit({g * 10, g * 10 + 1}).ok());
  ASSERT_TRUE(l->sync().ok());
  lease a = *l->acquire("w1");
  lease b = *l->acquire("w2");
  ASSERT_TRUE(l->sync().ok());
  (void)l->take_events();          // the leases' own
  finish(*l, a, /*train=*/false);  // a's commit event goes with the first batch

  auto first = l->begin_sync();
  ASSERT_TRUE(first.ok()) << first.err().to_string();
  EXPECT_NE(first->write, work_ledger::sync_batch::how::nothing);
  finish(*l, b, /*train=*/false);  // b's records and event: after the batch was taken
  EXPECT_FALSE(l->begin_sync().ok()) << "one batch at a time";
  EXPECT_FALSE(l->sync().ok()) << "one batch at a time";
  EXPECT_TRUE(l->take_events().empty()) << "nothing is durable yet";

  ASSERT_TRUE(work_ledger::write_sync(*st, *first).ok());
  ASSERT_TRUE(l->end_sync(std::move(*first), ok_status()).ok());
  auto ev = l->take_events();
  ASSERT_FALSE(ev.empty());
  for (const auto& e : ev) EXPECT_EQ(e.unit, a.unit);

  ASSERT_TRUE(l->sync().ok());
  ev = l->take_events();
  ASSERT_FALSE(ev.empty());
  for (const auto& e : ev) EXPECT_EQ(e.unit, b.unit);
  std::string before = dump(*l);
  l.reset();  // crash, with no lease open
  EXPECT_EQ(dump(*open()), before);
}

TEST_F(ledger_recovery, a_failed_batch_puts_its_records_and_events_back_in_front_of_the_tail) {
  tearing_store tearing(*st);
  auto l = work_ledger::open(opts, clk, &tearing);
  ASSERT_TRUE(l.ok()) << l.err().to_string();
  ASSERT_TRUE((*l)->add_shard("s0").ok());
  for (group_id g = 1; g <= 3; ++g) ASSERT_TRUE((*l)->add_unit({g * 10, g * 10 + 1}).ok());
  ASSERT_TRUE((*l)->sync().ok());
  lease a = *(*l)->acquire("w1");
  lease b = *(*l)->acquire("w2");
  ASSERT_TRUE((*l)->sync().ok());
  (void)(*l)->take_events();  // the leases' own
  finish(**l, a, /*train=*/false);

  auto batch = (*l)->begin_sync();
  ASSERT_TRUE(batch.ok());
  finish(**l, b, /*train=*/false);  // added while the batch is out
  tearing.tear_next_append = true;
  status written = work_ledger::write_sync(tearing, *batch);
  ASSERT_FALSE(written.ok());
  auto ended = (*l)->end_sync(std::move(*batch), written);
  ASSERT_FALSE(ended.ok());
  EXPECT_NE(ended.err().message.find("no space left"), std::string::npos) << ended.err().message;
  EXPECT_TRUE((*l)->take_events().empty()) << "a failed batch releases nothing";

  ASSERT_TRUE((*l)->sync().ok()) << "the retry writes both batches' records, in order";
  auto ev = (*l)->take_events();
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev.front().unit, a.unit);
  EXPECT_EQ(ev.back().unit, b.unit);
  // a's events, then b's: the failed batch's went back in front of those added meanwhile.
  EXPECT_TRUE(std::is_partitioned(ev.begin(), ev.end(),
                                  [&](const ledger_event& e) { return e.unit == a.unit; }));
  std::string before = dump(**l);
  l->reset();
  recovery_info info;
  auto r = open(&info);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(dump(*r), before);
  EXPECT_TRUE(r->check_invariant().ok()) << r->check_invariant().err().to_string();
}

TEST_F(ledger_recovery, a_snapshot_is_of_the_state_its_batch_makes_durable) {
  opts.snapshot_every = 5;
  auto l = open();
  ASSERT_TRUE(l->add_shard("s0").ok());
  for (group_id g = 1; g <= 6; ++g) ASSERT_TRUE(l->add_unit({g}).ok());
  auto batch = l->begin_sync();
  ASSERT_TRUE(batch.ok());
  // epoch_begin, the shard and 6 units: 8 records, a snapshot every 5.
  ASSERT_FALSE(batch->snapshot_key.empty());
  // Records added while the batch is out are neither in its segment nor in its snapshot.
  for (group_id g = 7; g <= 9; ++g) ASSERT_TRUE(l->add_unit({g}).ok());
  ASSERT_TRUE(work_ledger::write_sync(*st, *batch).ok());
  ASSERT_TRUE(l->end_sync(std::move(*batch), ok_status()).ok());
  std::string with_nine = dump(*l);
  ASSERT_TRUE(l->sync().ok());  // 3 records since the snapshot: no new one
  EXPECT_EQ(st->list("ledger/snapshot/")->size(), 1u);
  l.reset();
  recovery_info info;
  auto r = open(&info);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(info.snapshot_seq, 8u);
  EXPECT_EQ(info.records_replayed, 3u);
  EXPECT_EQ(dump(*r), with_nine);
}

// A store without appends (S3): one segment object per batch, written on another thread as
// the coordinator's writer does.
class put_only_store final : public store::object_store {
 public:
  explicit put_only_store(store::object_store& inner) : inner_(inner) {}
  status put(const std::string& k, const std::string& b) override { return inner_.put(k, b); }
  result<std::string> get(const std::string& k) const override { return inner_.get(k); }
  result<std::vector<std::string>> list(const std::string& p) const override {
    return inner_.list(p);
  }
  status remove(const std::string& k) override { return inner_.remove(k); }
  std::string describe() const override { return "put-only:" + inner_.describe(); }

 private:
  store::object_store& inner_;
};

TEST_F(ledger_recovery, on_a_store_without_appends_each_batch_is_one_segment_object) {
  put_only_store s3_like(*st);
  auto l = work_ledger::open(opts, clk, &s3_like);
  ASSERT_TRUE(l.ok()) << l.err().to_string();
  ASSERT_TRUE((*l)->add_shard("s0").ok());
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE((*l)->add_unit({group_id(round * 2 + 1), group_id(round * 2 + 2)}).ok());
    auto batch = (*l)->begin_sync();
    ASSERT_TRUE(batch.ok());
    EXPECT_EQ(batch->write, work_ledger::sync_batch::how::put);
    ASSERT_TRUE((*l)->acquire("w" + std::to_string(round)).ok());  // meanwhile
    status written;
    std::thread writer([&] { written = work_ledger::write_sync(s3_like, *batch); });
    writer.join();
    ASSERT_TRUE((*l)->end_sync(std::move(*batch), written).ok());
  }
  ASSERT_TRUE((*l)->sync().ok());
  EXPECT_EQ(st->list("ledger/journal/")->size(), 5u) << "open + 3 batches + the last sync";
  std::string before = dump(**l);
  l->reset();
  recovery_info info;
  auto r = work_ledger::open(opts, clk, &s3_like, &info);
  ASSERT_TRUE(r.ok()) << r.err().to_string();
  EXPECT_EQ(info.leases_expired, 3u);
  EXPECT_TRUE((*r)->check_invariant().ok()) << (*r)->check_invariant().err().to_string();
}

}  // namespace
}  // namespace moerl::ledger
