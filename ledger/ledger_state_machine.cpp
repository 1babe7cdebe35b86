#include "ledger/internal/ledger_state.h"

#include <algorithm>

namespace moerl::ledger::detail {

void emit(work_ledger::state& st, ledger_event e) {
  if (!st.replaying) st.events_unsynced.push_back(std::move(e));
}

void set_unit_state(work_ledger::state& st, unit_rec& u, unit_state s) {
  if (u.state == s) return;
  if (u.state == unit_state::pending) --st.num_pending;
  if (u.state == unit_state::leased) st.leased_ids.erase(u.id);
  u.state = s;
  if (s == unit_state::pending) ++st.num_pending;
  if (s == unit_state::leased) st.leased_ids.insert(u.id);
}

void rebuild_unit_indexes(work_ledger::state& st) {
  st.leased_ids.clear();
  st.num_pending = 0;
  for (const auto& [id, u] : st.units) {
    if (u.state == unit_state::pending) ++st.num_pending;
    if (u.state == unit_state::leased) st.leased_ids.insert(id);
  }
}

namespace {

// Committed groups whose samples are gone (their shard was lost, or they were claimed by a
// lost trainer and their shard is gone): dropped as shard_lost, and the unit re-opened with
// just those groups. `reopen` lists committed, untrained groups.
void reopen_groups(work_ledger::state& st, accounting& acct, const ledger_options& opts,
                   unit_rec& u, const std::vector<group_id>& reopen) {
  if (reopen.empty()) return;
  const uint64_t g = opts.group_size;
  for (auto grp : reopen) {
    u.committed.erase(grp);
    u.claimed.erase(grp);
    if (u.handed.erase(grp)) acct.handed -= g;
  }
  acct.committed -= reopen.size() * g;
  acct.dropped[drop_reason::shard_lost] += reopen.size() * g;
  if (u.state == unit_state::committed) {
    u.todo = reopen;
    set_unit_state(st, u, unit_state::pending);
    st.pending.push_back(u.id);
  } else {
    // Pending already (re-opened before, not leased again yet): these groups join its next
    // attempt.
    u.todo.insert(u.todo.end(), reopen.begin(), reopen.end());
  }
}

// Claimed groups whose claimant was lost and whose shard was lost: nobody holds their samples
// any more, so they are re-opened. Not while the unit is leased (its lease's slots are fixed):
// then when that lease ends or commits.
void release_dead_claims(work_ledger::state& st, accounting& acct, const ledger_options& opts,
                         unit_rec& u) {
  if (u.state == unit_state::leased) return;
  std::vector<group_id> dead;
  for (const auto& [grp, c] : u.claimed)
    if (!claim_live(st, u, grp) && c.shard.empty()) dead.push_back(grp);
  reopen_groups(st, acct, opts, u, dead);
}

void end_lease(work_ledger::state& st, accounting& acct, const ledger_options& opts, unit_rec& u,
               const char* reason) {
  uint64_t n = slots(u, opts.group_size);
  acct.in_flight -= n;
  acct.dropped[reason] += n;
  auto occ = st.occupied.find(u.shard);
  if (occ != st.occupied.end()) occ->second -= n;
  emit(st, {ledger_event::kind::attempt_fenced, u.shard, u.id, u.attempt, {}, 0});
  set_unit_state(st, u, unit_state::pending);
  u.worker.clear();
  u.deadline = 0;
  u.reported = false;
  u.acked = false;
  u.ack_accepted.clear();
  u.ack_stale.clear();
  st.pending.push_back(u.id);
  release_dead_claims(st, acct, opts, u);
}

void commit(work_ledger::state& st, accounting& acct, const ledger_options& opts, unit_rec& u) {
  uint64_t g = opts.group_size;
  acct.in_flight -= slots(u, opts.group_size);
  acct.committed += u.ack_accepted.size() * g;
  if (!u.ack_stale.empty()) {
    acct.dropped[drop_reason::stale_policy] += u.ack_stale.size() * g;
    auto occ = st.occupied.find(u.shard);
    if (occ != st.occupied.end()) occ->second -= u.ack_stale.size() * g;
  }
  for (auto grp : u.ack_accepted) u.committed.insert(grp);
  set_unit_state(st, u, unit_state::committed);
  u.worker.clear();
  u.todo.clear();
  u.reported = false;
  u.acked = false;
  u.ack_accepted.clear();
  u.ack_stale.clear();
  emit(st, {ledger_event::kind::unit_committed, u.shard, u.id, u.attempt, {}, 0});
  release_dead_claims(st, acct, opts, u);
}

}  // namespace

status apply_record(work_ledger::state& st, accounting& acct, uint32_t& epoch,
                    const ledger_options& opts, const journal_record& r) {
  auto bug = [&](const std::string& what) {
    return error(errc::internal, "ledger record " + std::to_string(r.seq) + ": " + what);
  };
  if (r.type == record_type::epoch_begin) {
    epoch = r.epoch;
    return ok_status();
  }
  if (r.type == record_type::shard_added) {
    if (std::find(st.shards.begin(), st.shards.end(), r.name) == st.shards.end()) {
      st.shards.push_back(r.name);
      st.occupied.emplace(r.name, 0);
    }
    return ok_status();
  }
  if (r.type == record_type::unit_added) {
    unit_rec u;
    u.id = r.unit;
    u.groups = r.groups;
    u.todo = r.groups;
    st.next_unit = std::max(st.next_unit, r.unit + 1);
    st.units.emplace(u.id, std::move(u));  // pending
    ++st.num_pending;
    st.pending.push_back(r.unit);
    return ok_status();
  }
  if (r.type == record_type::shard_lost) {
    st.shards.erase(std::remove(st.shards.begin(), st.shards.end(), r.name), st.shards.end());
    st.occupied.erase(r.name);
    for (auto& [id, u] : st.units) {
      if (u.shard != r.name) continue;
      if (u.state == unit_state::leased) {
        end_lease(st, acct, opts, u, drop_reason::shard_lost);
        continue;
      }
      // Committed groups no trainer received are gone with the shard: drop them and
      // regenerate exactly those groups under a new attempt. Groups handed but not claimed go
      // too: no trainer trains them any more (a late claim is refused). A group a live trainer
      // incarnation claimed stays handed: it is that trainer's now, and its confirmation comes
      // from the trainer (LEDGER.md, "Claimed before trained").
      std::vector<group_id> reopen;
      for (auto grp : u.committed)
        if (!u.trained.count(grp) && !claim_live(st, u, grp)) reopen.push_back(grp);
      reopen_groups(st, acct, opts, u, reopen);
    }
    // The claimed groups served from this shard are with their trainers only now: no shard
    // takes them back (a process recreated under the same name starts empty), so their claim
    // names no shard. Those of lost trainer incarnations are re-opened.
    for (auto& [id, u] : st.units)
      for (auto& [grp, c] : u.claimed)
        if (c.shard == r.name) c.shard.clear();
    for (auto& [id, u] : st.units) release_dead_claims(st, acct, opts, u);
    return ok_status();
  }
  if (r.type == record_type::consumer_lost) {
    auto& floor = st.consumer_floor[r.name];
    floor = std::max(floor, uint64_t(r.deadline) + 1);
    for (auto& [id, u] : st.units) release_dead_claims(st, acct, opts, u);
    return ok_status();
  }

  auto it = st.units.find(r.unit);
  if (it == st.units.end()) return bug("unknown unit " + std::to_string(r.unit));
  unit_rec& u = it->second;
  // Whether the record names the unit's open lease (the records below need it to).
  const bool current = u.state == unit_state::leased && u.attempt == r.attempt;
  switch (r.type) {
    case record_type::leased: {
      if (u.state != unit_state::pending) return bug("lease of a unit that is not pending");
      set_unit_state(st, u, unit_state::leased);
      u.attempt = r.attempt;
      u.worker = r.name;
      u.shard = r.shard;
      u.deadline = r.deadline;
      uint64_t n = slots(u, opts.group_size);
      acct.dispatched += n;
      acct.in_flight += n;
      st.occupied[u.shard] += n;
      // Round-robin continues after the chosen shard (here, so that replay agrees).
      auto sh = std::find(st.shards.begin(), st.shards.end(), u.shard);
      if (sh != st.shards.end()) st.rr = size_t(sh - st.shards.begin() + 1) % st.shards.size();
      // Lazy FIFO removal: the front entry is this unit (acquire takes the front).
      auto pos = std::find(st.pending.begin(), st.pending.end(), u.id);
      if (pos != st.pending.end()) st.pending.erase(pos);
      emit(st,
           {ledger_event::kind::attempt_opened, u.shard, u.id, u.attempt, u.todo, opts.group_size});
      return ok_status();
    }
    case record_type::renewed:
      if (!current) return bug("renew of a dead lease");
      u.deadline = r.deadline;
      return ok_status();
    case record_type::ended:
      if (!current) return bug("end of a dead lease");
      end_lease(st, acct, opts, u, drop_reason_name(r.reason));
      return ok_status();
    case record_type::reported:
      if (!current) return bug("report on a dead lease");
      u.reported = true;
      if (u.acked) commit(st, acct, opts, u);
      return ok_status();
    case record_type::acked:
      if (!current) return bug("ack on a dead lease");
      u.acked = true;
      u.ack_accepted = r.groups;
      u.ack_stale = r.groups2;
      if (u.reported) commit(st, acct, opts, u);
      return ok_status();
    case record_type::consumed:
    case record_type::handed: {
      group_id grp = r.groups.empty() ? 0 : r.groups[0];
      uint64_t g = opts.group_size;
      uint64_t handout = r.groups2.empty() ? 0 : r.groups2[0];
      if (u.committed.count(grp) && !u.trained.count(grp) && !u.handed.count(grp) &&
          u.attempt == r.attempt) {
        if (r.type == record_type::handed) {
          u.handed.emplace(grp, handout);
          acct.handed += g;
          return ok_status();
        }
        u.trained.emplace(grp, handout);
        acct.trained += g;
        auto occ = st.occupied.find(u.shard);
        if (occ != st.occupied.end()) occ->second -= g;
      } else {
        acct.duplicated += g;
      }
      return ok_status();
    }
    case record_type::trained:
    case record_type::handed_back:
    case record_type::handed_dropped: {
      // Validated before they are appended: the group is handed under this hand-out id.
      group_id grp = r.groups.empty() ? 0 : r.groups[0];
      uint64_t g = opts.group_size;
      auto h = u.handed.find(grp);
      if (h == u.handed.end() || handed_attempt(u, grp) != r.attempt)
        return bug("unit " + std::to_string(u.id) + " group " + std::to_string(grp) +
                   " is not handed");
      const uint64_t handout = h->second;
      const shard_id from = handed_shard(u, grp);
      u.handed.erase(h);
      u.claimed.erase(grp);
      acct.handed -= g;
      if (r.type == record_type::handed_back) return ok_status();  // buffered again
      auto occ = st.occupied.find(from);
      if (occ != st.occupied.end()) occ->second -= g;
      if (r.type == record_type::trained) {
        u.trained.emplace(grp, handout);
        acct.trained += g;
        return ok_status();
      }
      u.committed.erase(grp);
      acct.committed -= g;
      acct.dropped[drop_reason_name(r.reason)] += g;
      return ok_status();
    }
    case record_type::claimed: {
      // Validated before it is appended (work_ledger::claim): committed, untrained, and not
      // handed or handed to this claim's hand-out or to a lost predecessor.
      group_id grp = r.groups.empty() ? 0 : r.groups[0];
      uint64_t handout = r.groups2.empty() ? 0 : r.groups2[0];
      auto [h, fresh] = u.handed.emplace(grp, handout);
      if (fresh)
        acct.handed += opts.group_size;
      else
        h->second = handout;
      const consumer_ref by{r.name, uint64_t(r.deadline)};
      u.claimed[grp] = claim_rec{by, r.attempt, u.shard};
      auto& floor = st.consumer_floor[r.name];
      floor = std::max(floor, by.incarnation);
      return ok_status();
    }
    case record_type::claim_refused: acct.refused_claims += opts.group_size; return ok_status();
    default: return bug("unexpected record type");
  }
}

}  // namespace moerl::ledger::detail
