// The ledger run whose store is committed under tests/ledger/data/format_v2/: it was
// written by the ledger before its codec moved to common/byte_codec.h, and
// ledger_format_fixture_test checks that today's code writes the same bytes for the same
// run and recovers the same state from the old files. It touches every journal record type
// and leaves both a snapshot (format version 2) and a journal segment after it.
#pragma once

#include "ledger/work_ledger.h"
#include "store/object_store.h"

namespace moerl::ledger::fixture {

inline ledger_options format_fixture_options() {
  ledger_options o;
  o.lease_timeout_ms = 1000;
  o.group_size = 2;
  o.max_groups_per_unit = 2;
  o.snapshot_every = 12;  // one snapshot after the first commits, two journal segments after
  o.store_prefix = "ledger";
  return o;
}

// Runs the fixture's calls on a fresh ledger in `store`; false on the first failed call.
// The ledger is dropped after its last sync, as in a crash.
inline bool run_format_fixture(store::object_store& store) {
  manual_clock clk{0};
  auto opened = work_ledger::open(format_fixture_options(), clk, &store);
  if (!opened) return false;
  work_ledger& l = **opened;
  bool ok = l.add_shard("s0").ok() && l.add_shard("s1").ok();
  for (group_id g = 1; g <= 4 && ok; ++g) ok = l.add_unit({g * 10, g * 10 + 1}).ok();
  ok = ok && l.sync().ok();
  auto a = l.acquire("w1");  // s0
  auto b = l.acquire("w2");  // s1
  if (!ok || !a || !b) return false;
  for (const lease* ls : {&*a, &*b}) {
    ok = ok && l.report(ls->unit, ls->attempt, ls->worker, ls->num_samples()).ok();
    ok = ok && l.record_ack({ls->unit, ls->attempt, ls->shard, ls->groups, {}}).ok();
  }
  // a is trained (with the shard's hand-out ids); b stays committed-untrained on s1.
  for (size_t i = 0; i < a->groups.size() && ok; ++i)
    ok = l.record_consumed({a->unit, a->attempt, a->groups[i], 2, 7 + i}).ok();
  if (!ok || !l.sync().ok()) return false;  // record 15: this sync writes the snapshot
  clk.set(500);
  auto c = l.acquire("w3");
  if (!ok || !c || !l.renew(c->unit, c->attempt, "w3").ok()) return false;
  if (l.worker_dead("w3").size() != 1 || !l.sync().ok()) return false;
  if (!l.shard_lost("s1").ok()) return false;  // b's committed groups are re-opened
  auto d = l.acquire("w4");                    // still open at the crash
  return d.ok() && l.sync().ok();
}

}  // namespace moerl::ledger::fixture
