// The ledger's calls: each validates its input against the state, then appends one
// journal record (or a few) that apply_record() (ledger_state_machine.cpp) applies. Opening
// and recovery are in ledger_recovery.cpp, sync() and take_events() in journal_sync.cpp.
#include "ledger/work_ledger.h"

#include <algorithm>

#include "common/log.h"
#include "common/status_try.h"
#include "ledger/internal/ledger_state.h"

namespace moerl::ledger {

const char* unit_state_name(unit_state s) {
  switch (s) {
    case unit_state::pending: return "pending";
    case unit_state::leased: return "leased";
    case unit_state::committed: return "committed";
  }
  return "unknown";
}

using namespace detail;

namespace {

std::string join_groups(const std::vector<group_id>& g) {
  std::string s;
  for (auto x : g) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

}  // namespace

work_ledger::work_ledger(const ledger_options& options, const clock& clock,
                         store::object_store* store)
    : opts_(options), clock_(clock), store_(store), st_(std::make_unique<state>()) {}

work_ledger::~work_ledger() = default;

result<ledger_options> ledger_options::from_config(const config& cfg) {
  ledger_options o;
  auto positive = [&](const char* key, int64_t max) -> result<int64_t> {
    int64_t v = cfg.get_int(key);
    if (v <= 0 || v > max)
      return error(errc::invalid_config, std::string(key) + " must be in [1, " +
                                             std::to_string(max) + "], got " + std::to_string(v));
    return v;
  };
  ASSIGN_OR_RETURN(auto lt, positive("ledger.lease_timeout_ms", int64_t(1) << 40));
  ASSIGN_OR_RETURN(auto gs, positive("ledger.group_size", 1 << 16));
  ASSIGN_OR_RETURN(auto mg, positive("ledger.max_groups_per_unit", 1 << 12));
  ASSIGN_OR_RETURN(auto se, positive("ledger.snapshot_every", 1 << 30));
  int64_t cap = cfg.get_int("buffer.capacity_samples");
  if (cap < 0) return error(errc::invalid_config, "buffer.capacity_samples must be >= 0");
  o.lease_timeout_ms = lt;
  o.group_size = uint32_t(gs);
  o.max_groups_per_unit = uint32_t(mg);
  o.snapshot_every = uint32_t(se);
  o.shard_capacity_samples = uint64_t(cap);
  o.store_prefix = cfg.get_string("ledger.store_prefix");
  if (o.store_prefix.empty() || o.store_prefix.find("..") != std::string::npos)
    return error(errc::invalid_config, "ledger.store_prefix must be a non-empty relative key");
  return o;
}

// ---- mutations --------------------------------------------------------------------------

status work_ledger::append(const journal_record& in) {
  journal_record r = in;
  r.seq = st_->next_seq;
  auto s = apply_record(*st_, acct_, epoch_, opts_, r);
  if (!s) {
    logger("ledger")->error("{}", s.err().message);
    return s;
  }
  ++st_->next_seq;
  ++st_->records_since_snapshot;
  if (store_) st_->tail.push_back(std::move(r));
  // The cheap half of the invariant after every change; check_invariant() recomputes all.
  // Slots that fit no bucket are `lost`, and the report shows them.
  uint64_t accounted = acct_.committed + acct_.in_flight + acct_.dropped_total();
  if (accounted != acct_.dispatched) {
    acct_.lost = acct_.dispatched > accounted ? acct_.dispatched - accounted : 0;
    logger("ledger")->error("record {}: dispatched {} != accounted {}", r.seq, acct_.dispatched,
                            accounted);
  }
  return ok_status();
}

result<unit_id> work_ledger::add_unit(const std::vector<group_id>& groups) {
  if (groups.empty() || groups.size() > opts_.max_groups_per_unit)
    return error(errc::invalid_argument, "add_unit: a unit needs 1.." +
                                             std::to_string(opts_.max_groups_per_unit) +
                                             " groups, got " + std::to_string(groups.size()));
  std::set<group_id> distinct(groups.begin(), groups.end());
  if (distinct.size() != groups.size())
    return error(errc::invalid_argument, "add_unit: group ids repeat: " + join_groups(groups));
  journal_record r;
  r.type = record_type::unit_added;
  r.unit = st_->next_unit;
  r.groups = groups;
  auto s = append(r);
  if (!s) return s.err();
  return r.unit;
}

status work_ledger::add_shard(const shard_id& shard) {
  if (shard.empty()) return error(errc::invalid_argument, "add_shard: empty shard id");
  if (std::find(st_->shards.begin(), st_->shards.end(), shard) != st_->shards.end())
    return ok_status();
  journal_record r;
  r.type = record_type::shard_added;
  r.name = shard;
  return append(r);
}

result<lease> work_ledger::acquire(const worker_id& worker) {
  if (worker.empty()) return error(errc::invalid_argument, "acquire: empty worker id");
  state& st = *st_;
  // Drop entries of units that left pending (leased by replay order, committed, ...).
  while (!st.pending.empty() && st.units.at(st.pending.front()).state != unit_state::pending)
    st.pending.pop_front();
  if (st.pending.empty()) return error(errc::not_found, "acquire: no pending unit");
  if (st.shards.empty()) return error(errc::capacity_exceeded, "acquire: no live buffer shard");
  unit_rec& u = st.units.at(st.pending.front());
  uint64_t n = slots(u, opts_.group_size);
  std::optional<size_t> pick;
  for (size_t k = 0; k < st.shards.size(); ++k) {
    size_t i = (st.rr + k) % st.shards.size();
    if (opts_.shard_capacity_samples == 0 ||
        st.occupied[st.shards[i]] + n <= opts_.shard_capacity_samples) {
      pick = i;
      break;
    }
  }
  if (!pick)
    return error(errc::capacity_exceeded,
                 "acquire: every buffer shard is full (waiting for trainers to consume)");
  uint32_t counter = attempt_epoch(u.attempt) == epoch_ ? attempt_counter(u.attempt) + 1 : 1;
  if (counter > kMaxAttemptCounter)
    return error(errc::capacity_exceeded,
                 "acquire: unit " + std::to_string(u.id) + " exhausted its attempts in this epoch");
  journal_record r;
  r.type = record_type::leased;
  r.unit = u.id;
  r.attempt = (epoch_ << kAttemptCounterBits) | counter;
  r.name = worker;
  r.shard = st.shards[*pick];
  r.deadline = clock_.now_ms() + opts_.lease_timeout_ms;
  auto s = append(r);
  if (!s) return s.err();
  lease l;
  l.unit = u.id;
  l.attempt = u.attempt;
  l.worker = worker;
  l.shard = u.shard;
  l.deadline_ms = u.deadline;
  l.groups = u.todo;
  l.group_size = opts_.group_size;
  return l;
}

result<std::vector<lease>> work_ledger::acquire_batch(const worker_id& worker, uint32_t max_units) {
  if (max_units == 0) return error(errc::invalid_argument, "acquire_batch: max_units must be >= 1");
  std::vector<lease> out;
  out.reserve(std::min<uint32_t>(max_units, 1024));
  while (out.size() < max_units) {
    auto l = acquire(worker);
    if (!l) {
      if (out.empty()) return l.err();
      break;  // queue empty or shards full: the batch is what fit
    }
    out.push_back(std::move(*l));
  }
  return out;
}

namespace {
// errc::not_found / stale_attempt naming the unit when (unit, attempt, worker) is not a
// current lease.
status check_lease(const work_ledger::state& st, unit_id unit, attempt_t attempt,
                   const worker_id* worker, const char* op) {
  auto it = st.units.find(unit);
  if (it == st.units.end())
    return error(errc::not_found, std::string(op) + ": unknown unit " + std::to_string(unit));
  const unit_rec& u = it->second;
  if (u.state != unit_state::leased || u.attempt != attempt)
    return error(errc::stale_attempt, std::string(op) + ": unit " + std::to_string(unit) +
                                          " attempt " + std::to_string(attempt) +
                                          " is fenced (unit is " + unit_state_name(u.state) +
                                          ", current attempt " + std::to_string(u.attempt) + ")");
  if (worker && u.worker != *worker)
    return error(errc::stale_attempt, std::string(op) + ": unit " + std::to_string(unit) +
                                          " is leased to " + u.worker + ", not " + *worker);
  return ok_status();
}
}  // namespace

result<int64_t> work_ledger::renew(unit_id unit, attempt_t attempt, const worker_id& worker) {
  auto c = check_lease(*st_, unit, attempt, &worker, "renew");
  if (!c) return c.err();
  journal_record r;
  r.type = record_type::renewed;
  r.unit = unit;
  r.attempt = attempt;
  r.deadline = clock_.now_ms() + opts_.lease_timeout_ms;
  auto s = append(r);
  if (!s) return s.err();
  return r.deadline;
}

status work_ledger::give_back(unit_id unit, attempt_t attempt, const worker_id& worker) {
  auto c = check_lease(*st_, unit, attempt, &worker, "give_back");
  if (!c) return c;
  journal_record r;
  r.type = record_type::ended;
  r.unit = unit;
  r.attempt = attempt;
  r.reason = drop_reason_code(drop_reason::returned);
  return append(r);
}

result<unit_state> work_ledger::report(unit_id unit, attempt_t attempt, const worker_id& worker,
                                       uint64_t num_samples) {
  auto c = check_lease(*st_, unit, attempt, &worker, "report");
  if (!c) return c.err();
  const unit_rec& u = st_->units.at(unit);
  if (u.reported)
    return error(errc::duplicate, "report: unit " + std::to_string(unit) + " attempt " +
                                      std::to_string(attempt) + " was already reported");
  uint64_t expected = slots(u, opts_.group_size);
  if (num_samples != expected)
    return error(errc::invalid_argument, "report: unit " + std::to_string(unit) + " attempt " +
                                             std::to_string(attempt) + " needs " +
                                             std::to_string(expected) + " samples, got " +
                                             std::to_string(num_samples));
  journal_record r;
  r.type = record_type::reported;
  r.unit = unit;
  r.attempt = attempt;
  auto s = append(r);
  if (!s) return s.err();
  return st_->units.at(unit).state;
}

result<unit_state> work_ledger::record_ack(const shard_ack& ack) {
  auto c = check_lease(*st_, ack.unit, ack.attempt, nullptr, "shard ack");
  if (!c) return c.err();
  const unit_rec& u = st_->units.at(ack.unit);
  if (ack.shard != u.shard)
    return error(errc::invalid_argument, "shard ack: unit " + std::to_string(ack.unit) +
                                             " goes to shard " + u.shard + ", not " + ack.shard);
  if (u.acked)
    return error(errc::duplicate, "shard ack: unit " + std::to_string(ack.unit) + " attempt " +
                                      std::to_string(ack.attempt) + " was already acknowledged");
  std::vector<group_id> all = ack.accepted_groups;
  all.insert(all.end(), ack.stale_groups.begin(), ack.stale_groups.end());
  std::sort(all.begin(), all.end());
  std::vector<group_id> want = u.todo;
  std::sort(want.begin(), want.end());
  if (all != want)
    return error(errc::invalid_argument,
                 "shard ack: unit " + std::to_string(ack.unit) + " groups {" + join_groups(all) +
                     "} are not the lease's groups {" + join_groups(want) + "}");
  journal_record r;
  r.type = record_type::acked;
  r.unit = ack.unit;
  r.attempt = ack.attempt;
  r.groups = ack.accepted_groups;
  r.groups2 = ack.stale_groups;
  auto s = append(r);
  if (!s) return s.err();
  return st_->units.at(ack.unit).state;
}

const char* handout_step_name(handout_step s) {
  switch (s) {
    case handout_step::consumed: return "consumed";
    case handout_step::handed: return "handed";
    case handout_step::trained: return "trained";
    case handout_step::returned: return "returned";
    case handout_step::dropped: return "dropped";
  }
  return "unknown";
}

result<const unit_rec*> work_ledger::consumed_unit(const consumption& cons) const {
  auto it = st_->units.find(cons.unit);
  if (it == st_->units.end())
    return error(errc::not_found, "consumed: unknown unit " + std::to_string(cons.unit));
  const unit_rec& u = it->second;
  if (std::find(u.groups.begin(), u.groups.end(), cons.group) == u.groups.end())
    return error(errc::invalid_argument, "consumed: unit " + std::to_string(cons.unit) +
                                             " has no group " + std::to_string(cons.group));
  if (cons.num_samples != opts_.group_size)
    return error(errc::invalid_argument, "consumed: a group has " +
                                             std::to_string(opts_.group_size) + " samples, got " +
                                             std::to_string(cons.num_samples));
  return &u;
}

status work_ledger::record_consumed(const consumption& cons) {
  return record_served(cons, record_type::consumed);
}

status work_ledger::record_served(const consumption& cons, record_type type) {
  ASSIGN_OR_RETURN(auto found, consumed_unit(cons));
  const unit_rec& u = *found;
  // The same hand-out again (its reply was lost): already recorded. A claim may have come
  // first (a trainer claims what it got before the shard's step arrives), and a successor's
  // claim may have moved the group to a later hand-out of the same attempt: both recorded.
  const attempt_t attempt = handed_attempt(u, cons.group);
  auto same = [&](const std::map<group_id, uint64_t>& m) {
    auto f = m.find(cons.group);
    return f != m.end() && cons.handout != 0 && f->second == cons.handout &&
           attempt == cons.attempt;
  };
  if (same(u.trained) || same(u.handed)) return ok_status();
  if (auto h = u.handed.find(cons.group); h != u.handed.end() && u.claimed.count(cons.group) &&
                                          attempt == cons.attempt && h->second > cons.handout)
    return ok_status();
  bool fresh = u.committed.count(cons.group) && !u.trained.count(cons.group) &&
               !u.handed.count(cons.group) && u.attempt == cons.attempt;
  // A confirming trainer claims before it trains (claim()), so a `handed` step for a group
  // that is not free (re-opened after its shard was declared lost, or held by another) is
  // refused and not counted: no trainer trains it; a trainer's refused claim counts it.
  if (!fresh && type == record_type::handed)
    return error(errc::stale_attempt, "handed: unit " + std::to_string(cons.unit) + " group " +
                                          std::to_string(cons.group) + " attempt " +
                                          std::to_string(cons.attempt) +
                                          " is not a committed group no trainer has: refused");
  // Recorded even when it is a duplicate: the report must show it.
  auto s = append(consumption_record(type, cons));
  if (!s) return s;
  if (!fresh)
    return error(errc::duplicate, "consumed: unit " + std::to_string(cons.unit) + " group " +
                                      std::to_string(cons.group) + " attempt " +
                                      std::to_string(cons.attempt) +
                                      " was not a committed group no trainer had");
  return ok_status();
}

status work_ledger::record_handout(const consumption& cons) {
  if (cons.step == handout_step::consumed) return record_served(cons, record_type::consumed);
  if (cons.step == handout_step::handed) return record_served(cons, record_type::handed);
  ASSIGN_OR_RETURN(auto found, consumed_unit(cons));
  const unit_rec& u = *found;
  const std::string what = std::string(handout_step_name(cons.step)) + ": unit " +
                           std::to_string(cons.unit) + " group " + std::to_string(cons.group) +
                           " hand-out " + std::to_string(cons.handout);
  auto h = u.handed.find(cons.group);
  const attempt_t attempt = handed_attempt(u, cons.group);
  const bool handed_here =
      h != u.handed.end() && h->second == cons.handout && attempt == cons.attempt;
  if (!handed_here) {
    // A step sent again after its reply was lost has already been applied; so has the step of
    // a hand-out a successor's claim superseded (a later hand-out of the same group).
    auto t = u.trained.find(cons.group);
    const bool applied = u.attempt == cons.attempt &&
                         ((cons.step == handout_step::trained && t != u.trained.end() &&
                           t->second == cons.handout) ||
                          (cons.step == handout_step::returned && h == u.handed.end() &&
                           u.committed.count(cons.group)) ||
                          (cons.step == handout_step::dropped && !u.committed.count(cons.group)));
    const bool superseded = cons.step != handout_step::trained && h != u.handed.end() &&
                            attempt == cons.attempt && h->second > cons.handout;
    if (applied || superseded) return ok_status();
    return error(errc::stale_attempt, what + " is not handed under that id (fenced)");
  }
  // A shard that was declared lost holds nothing any more: it cannot take a group back, and a
  // claimed group of it stays with its trainer (only a late `trained` is the truth).
  if (cons.step != handout_step::trained && !shard_live(*st_, handed_shard(u, cons.group)))
    return error(errc::stale_attempt, what + ": its shard was declared lost");
  journal_record r;
  r.unit = cons.unit;
  r.attempt = cons.attempt;
  r.groups = {cons.group};
  r.groups2 = {cons.handout};
  switch (cons.step) {
    case handout_step::trained: r.type = record_type::trained; break;
    case handout_step::returned: r.type = record_type::handed_back; break;
    default:
      r.type = record_type::handed_dropped;
      r.reason = drop_reason_code(drop_reason::trainer_lost_stale);
      break;
  }
  return append(r);
}

result<std::vector<unit_id>> work_ledger::shard_lost(const shard_id& shard) {
  if (std::find(st_->shards.begin(), st_->shards.end(), shard) == st_->shards.end())
    return error(errc::not_found, "shard_lost: unknown shard " + shard);
  const std::set<unit_id> before = pending_ids();
  journal_record r;
  r.type = record_type::shard_lost;
  r.name = shard;
  auto s = append(r);
  if (!s) return s.err();
  std::vector<unit_id> reopened;
  for (const auto& [id, u] : st_->units)
    if (u.state == unit_state::pending && !before.count(id)) reopened.push_back(id);
  return reopened;
}

std::set<unit_id> work_ledger::pending_ids() const {
  std::set<unit_id> ids;
  for (const auto& [id, u] : st_->units)
    if (u.state == unit_state::pending) ids.insert(id);
  return ids;
}

std::vector<ended_lease> work_ledger::end_leases(const std::vector<unit_id>& units,
                                                 const char* reason) {
  std::vector<ended_lease> out;
  for (auto id : units) {
    const unit_rec& u = st_->units.at(id);
    ended_lease e{id, u.attempt, u.worker, reason};
    journal_record r;
    r.type = record_type::ended;
    r.unit = id;
    r.attempt = u.attempt;
    r.reason = drop_reason_code(reason);
    if (append(r)) out.push_back(std::move(e));
  }
  return out;
}

std::vector<ended_lease> work_ledger::expire_due() {
  const int64_t now = clock_.now_ms();
  return end_leases(leased_units_where(*st_, [&](const unit_rec& u) { return u.deadline <= now; }),
                    drop_reason::lease_expired);
}

std::vector<ended_lease> work_ledger::worker_dead(const worker_id& worker) {
  return end_leases(leased_units_where(*st_, [&](const unit_rec& u) { return u.worker == worker; }),
                    drop_reason::worker_dead);
}

// ---- inspection -----------------------------------------------------------------------

status work_ledger::check_invariant() const {
  accounting re;
  uint64_t g = opts_.group_size;
  size_t num_pending = 0;
  std::set<unit_id> leased;
  for (const auto& [id, u] : st_->units) {
    num_pending += u.state == unit_state::pending;
    if (u.state == unit_state::leased) leased.insert(id);
    if (u.state == unit_state::leased) re.in_flight += slots(u, opts_.group_size);
    re.committed += u.committed.size() * g;
    re.trained += u.trained.size() * g;
    re.handed += u.handed.size() * g;
    for (const auto* m : {&u.trained, &u.handed})
      for (const auto& [grp, handout] : *m)
        if (!u.committed.count(grp) || (u.trained.count(grp) && u.handed.count(grp)))
          return error(errc::internal, "ledger: unit " + std::to_string(id) + " group " +
                                           std::to_string(grp) +
                                           " trained or handed but not committed, or both");
  }
  for (const auto& [id, u] : st_->units)
    for (const auto& [grp, c] : u.claimed)
      if (!u.handed.count(grp))
        return error(errc::internal, "ledger: unit " + std::to_string(id) + " group " +
                                         std::to_string(grp) + " claimed but not handed");
  if (num_pending != st_->num_pending || leased != st_->leased_ids)
    return error(errc::internal, "ledger: unit indexes disagree with units (pending " +
                                     std::to_string(st_->num_pending) + " vs " +
                                     std::to_string(num_pending) + ", leased " +
                                     std::to_string(st_->leased_ids.size()) + " vs " +
                                     std::to_string(leased.size()) + ")");
  if (re.in_flight != acct_.in_flight || re.committed != acct_.committed ||
      re.trained != acct_.trained || re.handed != acct_.handed)
    return error(errc::internal,
                 "ledger: counters disagree with units (in_flight " +
                     std::to_string(acct_.in_flight) + " vs " + std::to_string(re.in_flight) +
                     ", committed " + std::to_string(acct_.committed) + " vs " +
                     std::to_string(re.committed) + ", trained " + std::to_string(acct_.trained) +
                     " vs " + std::to_string(re.trained) + ", handed " +
                     std::to_string(acct_.handed) + " vs " + std::to_string(re.handed) + ")");
  return acct_.check();
}

std::optional<unit_view> work_ledger::find(unit_id unit) const {
  auto it = st_->units.find(unit);
  if (it == st_->units.end()) return std::nullopt;
  const unit_rec& u = it->second;
  unit_view v;
  v.unit = u.id;
  v.state = u.state;
  v.attempt = u.attempt;
  v.worker = u.worker;
  v.shard = u.shard;
  v.deadline_ms = u.deadline;
  v.reported = u.reported;
  v.groups = u.groups;
  v.todo = u.todo;
  v.committed.assign(u.committed.begin(), u.committed.end());
  for (const auto& [grp, handout] : u.trained) v.trained.push_back(grp);
  for (const auto& [grp, handout] : u.handed) v.handed.push_back(grp);
  for (const auto& [grp, c] : u.claimed) v.claimed.push_back(grp);
  return v;
}

size_t work_ledger::num_units() const { return st_->units.size(); }
size_t work_ledger::num_pending() const { return st_->num_pending; }
size_t work_ledger::num_leased() const { return st_->leased_ids.size(); }

std::map<worker_id, uint32_t> work_ledger::leases_per_worker() const {
  std::map<worker_id, uint32_t> out;
  for (unit_id id : st_->leased_ids) ++out[st_->units.at(id).worker];
  return out;
}

}  // namespace moerl::ledger
