// Private to the ledger: its whole state and the one function that changes it. The live
// path (work_ledger.cpp) and recovery (ledger_recovery.cpp) both go through apply_record(),
// which makes "survives a coordinator restart" a property of one function instead of two
// that must agree. The snapshot codec (snapshot_codec.h) writes and reads this state.
#pragma once

#ifndef MOERL_INSIDE_moerl_ledger
#error \
    "ledger/internal/ledger_state.h is private to moerl_ledger (ledger/): include its public headers"
#endif

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ledger/internal/journal_record.h"
#include "ledger/work_ledger.h"

namespace moerl::ledger {

// A trainer's claim on a handed group: who, and the attempt and shard the group was served
// from (a claimed group outlives its shard and may belong to an older attempt than the unit's).
struct claim_rec {
  consumer_ref by;
  attempt_t attempt = 0;
  shard_id shard;  // empty once that shard was declared lost: only the trainer holds it now
};

struct unit_rec {
  unit_id id = 0;
  std::vector<group_id> groups;
  unit_state state = unit_state::pending;
  attempt_t attempt = 0;
  worker_id worker;
  shard_id shard;
  int64_t deadline = 0;
  bool reported = false;
  bool acked = false;
  std::vector<group_id> ack_accepted;
  std::vector<group_id> ack_stale;
  std::vector<group_id> todo;            // groups of the current/next attempt
  std::set<group_id> committed;          // committed, not dropped since
  std::map<group_id, uint64_t> trained;  // confirmed by a trainer -> the shard's hand-out id
  std::map<group_id, uint64_t> handed;   // served, not confirmed yet -> the hand-out id
  // Handed groups a trainer claimed before training them (a subset of `handed`): they belong
  // to that consumer incarnation, so losing their shard does not re-open them.
  std::map<group_id, claim_rec> claimed;
};

struct work_ledger::state {
  std::map<unit_id, unit_rec> units;
  std::deque<unit_id> pending;  // FIFO; an entry is live iff its unit is pending
  // Indexes over `units`, kept by set_unit_state (the only code that changes a unit's state):
  // the coordinator asks for leased units and counts on every tick and lease, and a walk over
  // every unit the run created grew with the run (issue 28: 15-287 ms per tick at 100k units).
  std::set<unit_id> leased_ids;
  size_t num_pending = 0;
  std::vector<shard_id> shards;  // live, in the order added (round-robin)
  size_t rr = 0;
  std::map<shard_id, uint64_t> occupied;  // open slots + committed-untrained samples
  // Trainer consumer name -> the lowest incarnation whose claims are taken: raised by every
  // claim (a newer incarnation means the older ones are lost) and by consumer_lost.
  std::map<std::string, uint64_t> consumer_floor;
  unit_id next_unit = 1;
  uint64_t next_seq = 1;  // seq of the next record
  uint64_t snapshot_seq = 0;
  uint64_t records_since_snapshot = 0;
  std::vector<journal_record> tail;  // applied, not yet durable
  // The journal segment sync() appends to (stores with appends); empty: the next sync starts
  // one, keyed by its first record. Closed at every snapshot (it is then covered) and after
  // a failed append (a retry must not land after torn bytes in the same segment).
  std::string open_segment;
  std::vector<ledger_event> events_unsynced;
  std::vector<ledger_event> events_ready;
  // A batch out with its writer (work_ledger::begin_sync): its records and events, put back
  // in front of the tail if the write fails.
  bool sync_out = false;
  std::vector<journal_record> tail_out;
  std::vector<ledger_event> events_out;
  bool replaying = false;  // recovery: state changes, but no event goes out again
};

namespace detail {

// Sample slots of the unit's current/next attempt.
inline uint64_t slots(const unit_rec& u, uint32_t group_size) {
  return uint64_t(u.todo.size()) * group_size;
}

// Queues an event for the shards (released by take_events() after the covering sync);
// dropped while replaying, because the events of replayed records went out before.
void emit(work_ledger::state& st, ledger_event e);

// The record of one hand-out step of one group (handed, trained, returned, a claim): its unit,
// attempt, group and the shard's hand-out id; the caller adds what its type needs.
inline journal_record consumption_record(record_type type, const consumption& c) {
  journal_record r;
  r.type = type;
  r.unit = c.unit;
  r.attempt = c.attempt;
  r.groups = {c.group};
  r.groups2 = {c.handout};
  return r;
}

// Whether the claim on `grp` (if any) is held by a consumer incarnation that is not lost.
inline bool claim_live(const work_ledger::state& st, const unit_rec& u, group_id grp) {
  auto c = u.claimed.find(grp);
  if (c == u.claimed.end()) return false;
  auto f = st.consumer_floor.find(c->second.by.name);
  return f == st.consumer_floor.end() || c->second.by.incarnation >= f->second;
}

// The attempt and shard a handed group was served from: its claim's, else the unit's.
inline attempt_t handed_attempt(const unit_rec& u, group_id grp) {
  auto c = u.claimed.find(grp);
  return c == u.claimed.end() ? u.attempt : c->second.attempt;
}
inline const shard_id& handed_shard(const unit_rec& u, group_id grp) {
  auto c = u.claimed.find(grp);
  return c == u.claimed.end() ? u.shard : c->second.shard;
}
inline bool shard_live(const work_ledger::state& st, const shard_id& s) {
  return !s.empty() && std::find(st.shards.begin(), st.shards.end(), s) != st.shards.end();
}

// Applies one record: the only place state and counters change. Records are validated
// before they are appended (live) or come from a CRC-checked journal (replay), so apply
// only asserts the state machine's shape and reports a violation as errc::internal.
status apply_record(work_ledger::state& st, accounting& acct, uint32_t& epoch,
                    const ledger_options& opts, const journal_record& r);

// Moves `u` to state `s`, keeping the state's indexes (leased_ids, num_pending).
void set_unit_state(work_ledger::state& st, unit_rec& u, unit_state s);
// Recomputes the indexes from `units` (after a snapshot filled them).
void rebuild_unit_indexes(work_ledger::state& st);

// Ids of the leased units for which `pred(unit_rec)` holds, in unit order. Collected
// before any lease is ended, because ending one changes the index being walked.
template <class Pred>
std::vector<unit_id> leased_units_where(const work_ledger::state& st, Pred pred) {
  std::vector<unit_id> ids;
  for (auto id : st.leased_ids)
    if (pred(st.units.at(id))) ids.push_back(id);
  return ids;
}

}  // namespace detail
}  // namespace moerl::ledger
