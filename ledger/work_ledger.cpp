// The ledger as a replayable state machine: every mutation is a journal record, and the
// live path and recovery both go through apply(). That makes "survives a coordinator
// restart" a property of one function instead of two that must agree.
#include "ledger/work_ledger.h"

#include <algorithm>
#include <deque>
#include <unordered_map>

#include "ledger/byte_codec.h"
#include "ledger/journal_format.h"
#include "common/log.h"
#include "store/object_store.h"

namespace moerl::ledger {

const char* unit_state_name(unit_state s) {
  switch (s) {
    case unit_state::pending: return "pending";
    case unit_state::leased: return "leased";
    case unit_state::committed: return "committed";
  }
  return "unknown";
}

namespace {

// Record types. Values are on disk: never renumber.
enum class rec : uint8_t {
  epoch_begin = 1,  // a coordinator incarnation starts (epoch)
  unit_added = 2,   // unit, groups
  shard_added = 3,  // name = shard
  leased = 4,       // unit, attempt, name = worker, shard, deadline
  renewed = 5,      // unit, attempt, deadline
  ended = 6,        // unit, attempt, reason: the lease ended without a commit
  reported = 7,     // unit, attempt
  acked = 8,        // unit, attempt, groups = accepted, groups2 = stale
  consumed = 9,     // unit, attempt, group (groups[0]), hand-out id (groups2[0]; absent = 0)
  shard_lost = 10,  // name = shard
};

// Drop reasons by on-disk code. Values are on disk: never renumber.
const char* const kReasons[] = {drop_reason::returned,           drop_reason::lease_expired,
                                drop_reason::worker_dead,        drop_reason::coordinator_restart,
                                drop_reason::stale_policy,       drop_reason::shard_lost};
uint8_t reason_code(const char* reason) {
  for (uint8_t i = 0; i < std::size(kReasons); ++i)
    if (std::string(kReasons[i]) == reason) return i;
  return 0;
}

}  // namespace

struct journal_record {
  rec type = rec::epoch_begin;
  uint64_t seq = 0;
  uint32_t epoch = 0;
  unit_id unit = 0;
  attempt_t attempt = 0;
  std::string name;
  shard_id shard;
  int64_t deadline = 0;
  uint8_t reason = 0;
  std::vector<uint64_t> groups;
  std::vector<uint64_t> groups2;
};
using record = journal_record;

namespace {

std::string encode_record(const record& r) {
  detail::byte_writer w;
  w.u8(static_cast<uint8_t>(r.type));
  w.u64(r.seq);
  w.u32(r.epoch);
  w.u64(r.unit);
  w.u32(r.attempt);
  w.str(r.name);
  w.str(r.shard);
  w.i64(r.deadline);
  w.u8(r.reason);
  w.u64s(r.groups);
  w.u64s(r.groups2);
  return std::move(w.bytes());
}

result<record> decode_record(const std::string& bytes) {
  detail::byte_reader rd(bytes.data(), bytes.size());
  record r;
  uint8_t t = rd.u8();
  r.seq = rd.u64();
  r.epoch = rd.u32();
  r.unit = rd.u64();
  r.attempt = rd.u32();
  r.name = rd.str();
  r.shard = rd.str();
  r.deadline = rd.i64();
  r.reason = rd.u8();
  r.groups = rd.u64s();
  r.groups2 = rd.u64s();
  if (!rd.ok() || !rd.at_end())
    return error(errc::malformed_message, "ledger journal: record does not decode");
  if (t < 1 || t > 10)
    return error(errc::malformed_message, "ledger journal: unknown record type " + std::to_string(t));
  if (r.reason >= std::size(kReasons))
    return error(errc::malformed_message, "ledger journal: unknown drop reason code");
  r.type = static_cast<rec>(t);
  return r;
}

std::string join_groups(const std::vector<group_id>& g) {
  std::string s;
  for (auto x : g) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

}  // namespace

// ---- state --------------------------------------------------------------------------

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
  std::vector<group_id> todo;       // groups of the current/next attempt
  std::set<group_id> committed;     // committed, not dropped since
  std::map<group_id, uint64_t> trained;  // handed to a trainer -> the shard's hand-out id
};

struct work_ledger::state {
  std::map<unit_id, unit_rec> units;
  std::deque<unit_id> pending;  // FIFO; an entry is live iff its unit is pending
  std::vector<shard_id> shards;  // live, in the order added (round-robin)
  size_t rr = 0;
  std::map<shard_id, uint64_t> occupied;  // open slots + committed-untrained samples
  unit_id next_unit = 1;
  uint64_t next_seq = 1;  // seq of the next record
  uint64_t snapshot_seq = 0;
  uint64_t records_since_snapshot = 0;
  std::vector<record> tail;  // applied, not yet durable
  std::vector<ledger_event> events_unsynced;
  std::vector<ledger_event> events_ready;
  bool replaying = false;
};

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
  auto lt = positive("ledger.lease_timeout_ms", int64_t(1) << 40);
  if (!lt) return lt.err();
  auto gs = positive("ledger.group_size", 1 << 16);
  if (!gs) return gs.err();
  auto mg = positive("ledger.max_groups_per_unit", 1 << 12);
  if (!mg) return mg.err();
  auto se = positive("ledger.snapshot_every", 1 << 30);
  if (!se) return se.err();
  int64_t cap = cfg.get_int("buffer.capacity_samples");
  if (cap < 0) return error(errc::invalid_config, "buffer.capacity_samples must be >= 0");
  o.lease_timeout_ms = *lt;
  o.group_size = uint32_t(*gs);
  o.max_groups_per_unit = uint32_t(*mg);
  o.snapshot_every = uint32_t(*se);
  o.shard_capacity_samples = uint64_t(cap);
  o.store_prefix = cfg.get_string("ledger.store_prefix");
  if (o.store_prefix.empty() || o.store_prefix.find("..") != std::string::npos)
    return error(errc::invalid_config, "ledger.store_prefix must be a non-empty relative key");
  return o;
}

// ---- the state machine ----------------------------------------------------------------

namespace {
uint64_t slots(const unit_rec& u, uint32_t group_size) {
  return uint64_t(u.todo.size()) * group_size;
}
}  // namespace

// Applies one record: the only place state and counters change. Records are validated
// before they are appended (live) or come from a CRC-checked journal (replay), so apply
// only asserts the state machine's shape and reports a violation as errc::internal.
static status apply_record(work_ledger::state& st, accounting& acct, uint32_t& epoch,
                           const ledger_options& opts, const record& r);

namespace {
void emit(work_ledger::state& st, ledger_event e) {
  if (!st.replaying) st.events_unsynced.push_back(std::move(e));
}

void end_lease(work_ledger::state& st, accounting& acct, const ledger_options& opts,
               unit_rec& u, const char* reason) {
  uint64_t n = slots(u, opts.group_size);
  acct.in_flight -= n;
  acct.dropped[reason] += n;
  auto occ = st.occupied.find(u.shard);
  if (occ != st.occupied.end()) occ->second -= n;
  emit(st, {ledger_event::kind::attempt_fenced, u.shard, u.id, u.attempt, {}, 0});
  u.state = unit_state::pending;
  u.worker.clear();
  u.deadline = 0;
  u.reported = false;
  u.acked = false;
  u.ack_accepted.clear();
  u.ack_stale.clear();
  st.pending.push_back(u.id);
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
  u.state = unit_state::committed;
  u.worker.clear();
  u.todo.clear();
  u.reported = false;
  u.acked = false;
  u.ack_accepted.clear();
  u.ack_stale.clear();
  emit(st, {ledger_event::kind::unit_committed, u.shard, u.id, u.attempt, {}, 0});
}
}  // namespace

static status apply_record(work_ledger::state& st, accounting& acct, uint32_t& epoch,
                           const ledger_options& opts, const record& r) {
  auto bug = [&](const std::string& what) {
    return error(errc::internal, "ledger record " + std::to_string(r.seq) + ": " + what);
  };
  if (r.type == rec::epoch_begin) {
    epoch = r.epoch;
    return ok_status();
  }
  if (r.type == rec::shard_added) {
    if (std::find(st.shards.begin(), st.shards.end(), r.name) == st.shards.end()) {
      st.shards.push_back(r.name);
      st.occupied.emplace(r.name, 0);
    }
    return ok_status();
  }
  if (r.type == rec::unit_added) {
    unit_rec u;
    u.id = r.unit;
    u.groups = r.groups;
    u.todo = r.groups;
    st.next_unit = std::max(st.next_unit, r.unit + 1);
    st.units.emplace(u.id, std::move(u));
    st.pending.push_back(r.unit);
    return ok_status();
  }
  if (r.type == rec::shard_lost) {
    st.shards.erase(std::remove(st.shards.begin(), st.shards.end(), r.name), st.shards.end());
    st.occupied.erase(r.name);
    uint64_t g = opts.group_size;
    for (auto& [id, u] : st.units) {
      if (u.shard != r.name) continue;
      if (u.state == unit_state::leased) {
        end_lease(st, acct, opts, u, drop_reason::shard_lost);
        continue;
      }
      // Committed groups no trainer received are gone with the shard: drop them and
      // regenerate exactly those groups under a new attempt.
      std::vector<group_id> reopen;
      for (auto grp : u.committed)
        if (!u.trained.count(grp)) reopen.push_back(grp);
      if (reopen.empty()) continue;
      for (auto grp : reopen) u.committed.erase(grp);
      acct.committed -= reopen.size() * g;
      acct.dropped[drop_reason::shard_lost] += reopen.size() * g;
      u.todo = reopen;
      if (u.state == unit_state::committed) {
        u.state = unit_state::pending;
        st.pending.push_back(u.id);
      }
    }
    return ok_status();
  }

  auto it = st.units.find(r.unit);
  if (it == st.units.end()) return bug("unknown unit " + std::to_string(r.unit));
  unit_rec& u = it->second;
  switch (r.type) {
    case rec::leased: {
      if (u.state != unit_state::pending) return bug("lease of a unit that is not pending");
      u.state = unit_state::leased;
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
      emit(st, {ledger_event::kind::attempt_opened, u.shard, u.id, u.attempt, u.todo,
                opts.group_size});
      return ok_status();
    }
    case rec::renewed:
      if (u.state != unit_state::leased || u.attempt != r.attempt) return bug("renew of a dead lease");
      u.deadline = r.deadline;
      return ok_status();
    case rec::ended:
      if (u.state != unit_state::leased || u.attempt != r.attempt) return bug("end of a dead lease");
      end_lease(st, acct, opts, u, kReasons[r.reason]);
      return ok_status();
    case rec::reported:
      if (u.state != unit_state::leased || u.attempt != r.attempt) return bug("report on a dead lease");
      u.reported = true;
      if (u.acked) commit(st, acct, opts, u);
      return ok_status();
    case rec::acked:
      if (u.state != unit_state::leased || u.attempt != r.attempt) return bug("ack on a dead lease");
      u.acked = true;
      u.ack_accepted = r.groups;
      u.ack_stale = r.groups2;
      if (u.reported) commit(st, acct, opts, u);
      return ok_status();
    case rec::consumed: {
      group_id grp = r.groups.empty() ? 0 : r.groups[0];
      uint64_t g = opts.group_size;
      uint64_t handout = r.groups2.empty() ? 0 : r.groups2[0];
      if (u.committed.count(grp) && !u.trained.count(grp) && u.attempt == r.attempt) {
        u.trained.emplace(grp, handout);
        acct.trained += g;
        auto occ = st.occupied.find(u.shard);
        if (occ != st.occupied.end()) occ->second -= g;
      } else {
        acct.duplicated += g;
      }
      return ok_status();
    }
    default:
      return bug("unexpected record type");
  }
}

// ---- open and recovery ----------------------------------------------------------------

namespace {

std::string encode_snapshot(const work_ledger::state& st, const accounting& acct,
                            uint32_t epoch, uint64_t last_seq) {
  detail::byte_writer w;
  w.u32(2);  // snapshot format version (2: hand-out ids of trained groups)
  w.u64(last_seq);
  w.u32(epoch);
  w.u64(st.next_unit);
  w.u64(st.rr);
  w.u32(uint32_t(st.shards.size()));
  for (const auto& s : st.shards) {
    w.str(s);
    w.u64(st.occupied.at(s));
  }
  w.u64s(std::vector<uint64_t>(st.pending.begin(), st.pending.end()));
  w.u64(acct.dispatched);
  w.u64(acct.committed);
  w.u64(acct.in_flight);
  w.u64(acct.lost);
  w.u64(acct.duplicated);
  w.u64(acct.trained);
  w.u32(uint32_t(acct.dropped.size()));
  for (const auto& [reason, n] : acct.dropped) {
    w.str(reason);
    w.u64(n);
  }
  w.u64(st.units.size());
  for (const auto& [id, u] : st.units) {
    w.u64(u.id);
    w.u64s(u.groups);
    w.u8(uint8_t(u.state));
    w.u32(u.attempt);
    w.str(u.worker);
    w.str(u.shard);
    w.i64(u.deadline);
    w.u8(uint8_t(u.reported) | uint8_t(u.acked) << 1);
    w.u64s(u.ack_accepted);
    w.u64s(u.ack_stale);
    w.u64s(u.todo);
    w.u64s(std::vector<uint64_t>(u.committed.begin(), u.committed.end()));
    std::vector<uint64_t> trained, handouts;
    for (const auto& [grp, handout] : u.trained) {
      trained.push_back(grp);
      handouts.push_back(handout);
    }
    w.u64s(trained);
    w.u64s(handouts);
  }
  return std::move(w.bytes());
}

status decode_snapshot(const std::string& bytes, work_ledger::state& st, accounting& acct,
                       uint32_t& epoch, uint64_t& last_seq) {
  detail::byte_reader rd(bytes.data(), bytes.size());
  auto bad = [](const std::string& what) {
    return error(errc::malformed_message, "ledger snapshot: " + what);
  };
  const uint32_t version = rd.u32();
  if (version != 1 && version != 2) return bad("unknown format version");
  last_seq = rd.u64();
  epoch = rd.u32();
  st.next_unit = rd.u64();
  st.rr = rd.u64();
  uint32_t ns = rd.u32();
  for (uint32_t i = 0; i < ns && rd.ok(); ++i) {
    std::string s = rd.str();
    st.occupied[s] = rd.u64();
    st.shards.push_back(s);
  }
  auto pend = rd.u64s();
  st.pending.assign(pend.begin(), pend.end());
  acct.dispatched = rd.u64();
  acct.committed = rd.u64();
  acct.in_flight = rd.u64();
  acct.lost = rd.u64();
  acct.duplicated = rd.u64();
  acct.trained = rd.u64();
  uint32_t nd = rd.u32();
  for (uint32_t i = 0; i < nd && rd.ok(); ++i) {
    std::string reason = rd.str();
    acct.dropped[reason] = rd.u64();
  }
  uint64_t nu = rd.u64();
  if (!rd.ok() || nu > rd.remaining()) return bad("truncated header");
  for (uint64_t i = 0; i < nu && rd.ok(); ++i) {
    unit_rec u;
    u.id = rd.u64();
    u.groups = rd.u64s();
    uint8_t s = rd.u8();
    if (s > 2) return bad("unknown unit state");
    u.state = unit_state(s);
    u.attempt = rd.u32();
    u.worker = rd.str();
    u.shard = rd.str();
    u.deadline = rd.i64();
    uint8_t flags = rd.u8();
    u.reported = flags & 1;
    u.acked = flags & 2;
    u.ack_accepted = rd.u64s();
    u.ack_stale = rd.u64s();
    u.todo = rd.u64s();
    auto c = rd.u64s();
    u.committed.insert(c.begin(), c.end());
    auto t = rd.u64s();
    std::vector<uint64_t> handouts = version >= 2 ? rd.u64s() : std::vector<uint64_t>(t.size(), 0);
    if (handouts.size() != t.size()) return bad("trained groups and hand-out ids differ in number");
    for (size_t k = 0; k < t.size(); ++k) u.trained.emplace(t[k], handouts[k]);
    st.units.emplace(u.id, std::move(u));
  }
  if (!rd.ok() || !rd.at_end()) return bad("does not decode");
  // The CRC guards against damage; these guard the rest of the ledger against a snapshot
  // that decodes but names things that do not exist.
  for (auto id : st.pending)
    if (!st.units.count(id)) return bad("pending unit " + std::to_string(id) + " does not exist");
  for (const auto& [id, u] : st.units) {
    if (id >= st.next_unit) return bad("unit " + std::to_string(id) + " >= next unit id");
    if (u.state == unit_state::leased && u.todo.empty())
      return bad("leased unit " + std::to_string(id) + " has no groups to generate");
  }
  return ok_status();
}

}  // namespace

result<std::unique_ptr<work_ledger>> work_ledger::open(const ledger_options& options,
                                                       const clock& clk,
                                                       store::object_store* store,
                                                       recovery_info* info) {
  if (options.group_size == 0 || options.max_groups_per_unit == 0 || options.lease_timeout_ms <= 0)
    return error(errc::invalid_argument, "ledger options: group_size, max_groups_per_unit and "
                                         "lease_timeout_ms must be positive");
  std::unique_ptr<work_ledger> l(new work_ledger(options, clk, store));
  recovery_info ri;
  state& st = *l->st_;
  const std::string& prefix = options.store_prefix;

  if (store) {
    // 1. The newest snapshot.
    auto snaps = store->list(detail::snapshot_dir(prefix));
    if (!snaps) return snaps.err();
    std::optional<std::string> snap_key;
    for (const auto& k : *snaps)
      if (detail::key_seq(detail::snapshot_dir(prefix), k)) snap_key = k;  // list is sorted
    if (snap_key) {
      auto bytes = store->get(*snap_key);
      if (!bytes) return bytes.err();
      auto fr = detail::read_frames(*bytes);
      if (fr.payloads.size() != 1 || fr.torn_bytes != 0)
        return error(errc::io_error, "ledger snapshot " + *snap_key + " is damaged");
      uint64_t last = 0;
      auto s = decode_snapshot(fr.payloads[0], st, l->acct_, l->epoch_, last);
      if (!s) return error(s.err().code, s.err().message + " (" + *snap_key + ")");
      ri.snapshot_seq = last;
      st.snapshot_seq = last;
      st.next_seq = last + 1;
      ri.recovered = true;
    }
    // 2. Journal segments after it, in order. Only the last segment may end torn.
    auto segs = store->list(detail::journal_dir(prefix));
    if (!segs) return segs.err();
    std::vector<std::pair<uint64_t, std::string>> seg_keys;
    for (const auto& k : *segs)
      if (auto seq = detail::key_seq(detail::journal_dir(prefix), k)) seg_keys.emplace_back(*seq, k);
    std::sort(seg_keys.begin(), seg_keys.end());
    st.replaying = true;
    for (size_t i = 0; i < seg_keys.size(); ++i) {
      const auto& key = seg_keys[i].second;
      auto bytes = store->get(key);
      if (!bytes) return bytes.err();
      auto fr = detail::read_frames(*bytes);
      bool last_segment = i + 1 == seg_keys.size();
      if (fr.torn_bytes && !last_segment)
        return error(errc::io_error, "ledger journal " + key + ": damaged record at byte " +
                                         std::to_string(fr.valid_bytes) +
                                         " in a segment that is not the last");
      for (const auto& payload : fr.payloads) {
        auto r = decode_record(payload);
        if (!r) return error(errc::io_error, "ledger journal " + key + ": " + r.err().message);
        if (r->seq < st.next_seq) continue;  // covered by the snapshot
        if (r->seq != st.next_seq)
          return error(errc::io_error, "ledger journal " + key + ": record " +
                                           std::to_string(r->seq) + " where " +
                                           std::to_string(st.next_seq) + " was expected");
        auto s = apply_record(st, l->acct_, l->epoch_, options, *r);
        if (!s) return s.err();
        st.next_seq = r->seq + 1;
        ++st.records_since_snapshot;
        ++ri.records_replayed;
        ri.recovered = true;
      }
      if (fr.torn_bytes) {
        // Keep only the good prefix, so that a later recovery does not find a torn
        // segment in the middle of the journal.
        ri.torn_bytes = fr.torn_bytes;
        auto put = store->put(key, bytes->substr(0, fr.valid_bytes));
        if (!put) return put.err();
        logger("ledger")->warn("journal {}: ignored {} torn bytes at its end", key, fr.torn_bytes);
      }
    }
    st.replaying = false;
  }

  // 3. A new incarnation: fences every attempt the previous one handed out.
  if (l->epoch_ + 1 > kMaxEpoch)
    return error(errc::capacity_exceeded, "ledger: coordinator epochs exhausted");
  record eb;
  eb.type = rec::epoch_begin;
  eb.epoch = l->epoch_ + 1;
  auto s = l->append(eb);
  if (!s) return s.err();
  if (ri.recovered) {
    std::vector<unit_id> open_leases;
    for (auto& [id, u] : st.units)
      if (u.state == unit_state::leased) open_leases.push_back(id);
    for (auto id : open_leases) {
      record e;
      e.type = rec::ended;
      e.unit = id;
      e.attempt = st.units[id].attempt;
      e.reason = reason_code(drop_reason::coordinator_restart);
      auto es = l->append(e);
      if (!es) return es.err();
      ++ri.leases_expired;
    }
    // Commits may have been journaled without their events reaching the shards: say
    // them again (shards apply them idempotently).
    for (auto& [id, u] : st.units) {
      if (u.committed.size() > u.trained.size() && st.occupied.count(u.shard))
        emit(st, {ledger_event::kind::unit_committed, u.shard, u.id, u.attempt, {}, 0});
    }
  }
  auto synced = l->sync();
  if (!synced) return synced.err();
  ri.epoch = l->epoch_;
  if (info) *info = ri;
  return l;
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
    logger("ledger")->error("record {}: dispatched {} != accounted {}", r.seq,
                            acct_.dispatched, accounted);
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
  record r;
  r.type = rec::unit_added;
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
  record r;
  r.type = rec::shard_added;
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
    return error(errc::capacity_exceeded, "acquire: unit " + std::to_string(u.id) +
                                              " exhausted its attempts in this epoch");
  record r;
  r.type = rec::leased;
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
    return error(errc::stale_attempt,
                 std::string(op) + ": unit " + std::to_string(unit) + " attempt " +
                     std::to_string(attempt) + " is fenced (unit is " +
                     unit_state_name(u.state) + ", current attempt " +
                     std::to_string(u.attempt) + ")");
  if (worker && u.worker != *worker)
    return error(errc::stale_attempt, std::string(op) + ": unit " + std::to_string(unit) +
                                          " is leased to " + u.worker + ", not " + *worker);
  return ok_status();
}
}  // namespace

result<int64_t> work_ledger::renew(unit_id unit, attempt_t attempt, const worker_id& worker) {
  auto c = check_lease(*st_, unit, attempt, &worker, "renew");
  if (!c) return c.err();
  record r;
  r.type = rec::renewed;
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
  record r;
  r.type = rec::ended;
  r.unit = unit;
  r.attempt = attempt;
  r.reason = reason_code(drop_reason::returned);
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
  record r;
  r.type = rec::reported;
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
    return error(errc::invalid_argument, "shard ack: unit " + std::to_string(ack.unit) +
                                             " groups {" + join_groups(all) +
                                             "} are not the lease's groups {" +
                                             join_groups(want) + "}");
  record r;
  r.type = rec::acked;
  r.unit = ack.unit;
  r.attempt = ack.attempt;
  r.groups = ack.accepted_groups;
  r.groups2 = ack.stale_groups;
  auto s = append(r);
  if (!s) return s.err();
  return st_->units.at(ack.unit).state;
}

status work_ledger::record_consumed(const consumption& cons) {
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
  auto tr = u.trained.find(cons.group);
  if (tr != u.trained.end() && cons.handout != 0 && tr->second == cons.handout && u.attempt == cons.attempt)
    return ok_status();  // the same hand-out again (its reply was lost): already recorded
  bool fresh = u.committed.count(cons.group) && tr == u.trained.end() && u.attempt == cons.attempt;
  record r;
  r.type = rec::consumed;
  r.unit = cons.unit;
  r.attempt = cons.attempt;
  r.groups = {cons.group};
  r.groups2 = {cons.handout};
  // Recorded even when it is a duplicate: the report must show it.
  auto s = append(r);
  if (!s) return s;
  if (!fresh)
    return error(errc::duplicate, "consumed: unit " + std::to_string(cons.unit) + " group " +
                                      std::to_string(cons.group) + " attempt " +
                                      std::to_string(cons.attempt) +
                                      " was not a committed, untrained group");
  return ok_status();
}

result<std::vector<unit_id>> work_ledger::shard_lost(const shard_id& shard) {
  if (std::find(st_->shards.begin(), st_->shards.end(), shard) == st_->shards.end())
    return error(errc::not_found, "shard_lost: unknown shard " + shard);
  std::set<unit_id> before;
  for (const auto& [id, u] : st_->units)
    if (u.state == unit_state::pending) before.insert(id);
  record r;
  r.type = rec::shard_lost;
  r.name = shard;
  auto s = append(r);
  if (!s) return s.err();
  std::vector<unit_id> reopened;
  for (const auto& [id, u] : st_->units)
    if (u.state == unit_state::pending && !before.count(id)) reopened.push_back(id);
  return reopened;
}

std::vector<ended_lease> work_ledger::expire_due() {
  int64_t now = clock_.now_ms();
  std::vector<ended_lease> out;
  std::vector<unit_id> due;
  for (const auto& [id, u] : st_->units)
    if (u.state == unit_state::leased && u.deadline <= now) due.push_back(id);
  for (auto id : due) {
    const unit_rec& u = st_->units.at(id);
    ended_lease e{id, u.attempt, u.worker, drop_reason::lease_expired};
    record r;
    r.type = rec::ended;
    r.unit = id;
    r.attempt = u.attempt;
    r.reason = reason_code(drop_reason::lease_expired);
    if (append(r)) out.push_back(std::move(e));
  }
  return out;
}

std::vector<ended_lease> work_ledger::worker_dead(const worker_id& worker) {
  std::vector<ended_lease> out;
  std::vector<unit_id> held;
  for (const auto& [id, u] : st_->units)
    if (u.state == unit_state::leased && u.worker == worker) held.push_back(id);
  for (auto id : held) {
    const unit_rec& u = st_->units.at(id);
    ended_lease e{id, u.attempt, u.worker, drop_reason::worker_dead};
    record r;
    r.type = rec::ended;
    r.unit = id;
    r.attempt = u.attempt;
    r.reason = reason_code(drop_reason::worker_dead);
    if (append(r)) out.push_back(std::move(e));
  }
  return out;
}

// ---- durability -----------------------------------------------------------------------

status work_ledger::sync() {
  state& st = *st_;
  if (!store_) {
    for (auto& e : st.events_unsynced) st.events_ready.push_back(std::move(e));
    st.events_unsynced.clear();
    return ok_status();
  }
  if (!st.tail.empty()) {
    std::string seg;
    for (const auto& r : st.tail) seg += detail::frame(encode_record(r));
    auto put = store_->put(detail::journal_key(opts_.store_prefix, st.tail.front().seq), seg);
    if (!put) return error(errc::io_error, "ledger sync: " + put.err().message);
    st.tail.clear();
  }
  for (auto& e : st.events_unsynced) st.events_ready.push_back(std::move(e));
  st.events_unsynced.clear();

  if (st.records_since_snapshot >= opts_.snapshot_every) {
    uint64_t last = st.next_seq - 1;
    auto put = store_->put(detail::snapshot_key(opts_.store_prefix, last),
                           detail::frame(encode_snapshot(st, acct_, epoch_, last)));
    if (!put) return error(errc::io_error, "ledger snapshot: " + put.err().message);
    st.records_since_snapshot = 0;
    st.snapshot_seq = last;
    // Everything up to `last` is in the snapshot: older segments and snapshots go. A crash
    // in between leaves extra objects that recovery skips by sequence number.
    for (const char* which : {"journal", "snapshot"}) {
      std::string dir = std::string(which) == "journal" ? detail::journal_dir(opts_.store_prefix)
                                                        : detail::snapshot_dir(opts_.store_prefix);
      auto keys = store_->list(dir);
      if (!keys) continue;
      for (const auto& k : *keys) {
        auto seq = detail::key_seq(dir, k);
        if (seq && *seq <= last && k != detail::snapshot_key(opts_.store_prefix, last))
          (void)store_->remove(k);  // best effort: a leftover is harmless
      }
    }
  }
  return ok_status();
}

std::vector<ledger_event> work_ledger::take_events() {
  if (!store_) (void)sync();
  std::vector<ledger_event> out;
  out.swap(st_->events_ready);
  return out;
}

// ---- inspection -----------------------------------------------------------------------

status work_ledger::check_invariant() const {
  accounting re;
  uint64_t g = opts_.group_size;
  for (const auto& [id, u] : st_->units) {
    if (u.state == unit_state::leased) re.in_flight += slots(u, opts_.group_size);
    re.committed += u.committed.size() * g;
    re.trained += u.trained.size() * g;
    for (const auto& [grp, handout] : u.trained)
      if (!u.committed.count(grp))
        return error(errc::internal, "ledger: unit " + std::to_string(id) + " group " +
                                         std::to_string(grp) + " trained but not committed");
  }
  if (re.in_flight != acct_.in_flight || re.committed != acct_.committed ||
      re.trained != acct_.trained)
    return error(errc::internal,
                 "ledger: counters disagree with units (in_flight " +
                     std::to_string(acct_.in_flight) + " vs " + std::to_string(re.in_flight) +
                     ", committed " + std::to_string(acct_.committed) + " vs " +
                     std::to_string(re.committed) + ", trained " + std::to_string(acct_.trained) +
                     " vs " + std::to_string(re.trained) + ")");
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
  return v;
}

size_t work_ledger::num_units() const { return st_->units.size(); }
size_t work_ledger::num_pending() const {
  size_t n = 0;
  for (const auto& [id, u] : st_->units) n += u.state == unit_state::pending;
  return n;
}
size_t work_ledger::num_leased() const {
  size_t n = 0;
  for (const auto& [id, u] : st_->units) n += u.state == unit_state::leased;
  return n;
}

}  // namespace moerl::ledger
