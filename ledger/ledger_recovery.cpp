// work_ledger::open: a fresh ledger, or the one in the store rebuilt from its newest
// snapshot plus the journal after it (ledger/LEDGER.md, "Recovery").
#include <algorithm>

#include "common/log.h"
#include "common/status_try.h"
#include "ledger/internal/journal_format.h"
#include "ledger/internal/ledger_state.h"
#include "ledger/internal/snapshot_codec.h"
#include "store/object_store.h"

namespace moerl::ledger {

result<std::unique_ptr<work_ledger>> work_ledger::open(const ledger_options& options,
                                                       const clock& clk, store::object_store* store,
                                                       recovery_info* info) {
  if (options.group_size == 0 || options.max_groups_per_unit == 0 || options.lease_timeout_ms <= 0)
    return error(errc::invalid_argument,
                 "ledger options: group_size, max_groups_per_unit and "
                 "lease_timeout_ms must be positive");
  std::unique_ptr<work_ledger> l(new work_ledger(options, clk, store));
  recovery_info ri;
  state& st = *l->st_;
  const std::string& prefix = options.store_prefix;

  if (store) {
    // 1. The newest snapshot.
    ASSIGN_OR_RETURN(auto snaps, store->list(detail::snapshot_dir(prefix)));
    std::optional<std::string> snap_key;
    for (const auto& k : snaps)
      if (detail::key_seq(detail::snapshot_dir(prefix), k)) snap_key = k;  // list is sorted
    if (snap_key) {
      ASSIGN_OR_RETURN(auto bytes, store->get(*snap_key));
      auto fr = detail::read_frames(bytes);
      if (fr.payloads.size() != 1 || fr.torn_bytes != 0)
        return error(errc::io_error, "ledger snapshot " + *snap_key + " is damaged");
      uint64_t last = 0;
      auto s = detail::decode_snapshot(fr.payloads[0], st, l->acct_, l->epoch_, last);
      if (!s) return error(s.err().code, s.err().message + " (" + *snap_key + ")");
      ri.snapshot_seq = last;
      st.snapshot_seq = last;
      st.next_seq = last + 1;
      ri.recovered = true;
    }
    // 2. Journal segments after it, in order.
    ASSIGN_OR_RETURN(auto segs, store->list(detail::journal_dir(prefix)));
    std::vector<std::pair<uint64_t, std::string>> seg_keys;
    for (const auto& k : segs)
      if (auto seq = detail::key_seq(detail::journal_dir(prefix), k))
        seg_keys.emplace_back(*seq, k);
    std::sort(seg_keys.begin(), seg_keys.end());
    st.replaying = true;
    // Torn bytes end a segment whose last write failed or was cut by a crash: those records
    // were never acknowledged, and sync() writes them again at the start of a later segment.
    // So a torn segment may sit anywhere; what may not is a gap, which the sequence check
    // finds (damage to acknowledged records leaves one) and blames on the torn segment.
    struct torn_segment {
      std::string key;
      size_t valid_bytes;
      size_t torn_bytes;
    };
    std::vector<torn_segment> torn;
    for (const auto& seg : seg_keys) {
      const std::string& key = seg.second;
      ASSIGN_OR_RETURN(auto bytes, store->get(key));
      auto fr = detail::read_frames(bytes);
      for (const auto& payload : fr.payloads) {
        auto r = detail::decode_record(payload);
        if (!r) return error(errc::io_error, "ledger journal " + key + ": " + r.err().message);
        if (r->seq < st.next_seq) continue;  // covered by the snapshot
        if (r->seq != st.next_seq) {
          std::string why = "ledger journal " + key + ": record " + std::to_string(r->seq) +
                            " where " + std::to_string(st.next_seq) + " was expected";
          if (!torn.empty())
            why += " (damaged record at byte " + std::to_string(torn.back().valid_bytes) + " of " +
                   torn.back().key + ")";
          return error(errc::io_error, why);
        }
        auto s = detail::apply_record(st, l->acct_, l->epoch_, options, *r);
        if (!s) return s.err();
        st.next_seq = r->seq + 1;
        ++st.records_since_snapshot;
        ++ri.records_replayed;
        ri.recovered = true;
      }
      if (fr.torn_bytes) torn.push_back({key, fr.valid_bytes, fr.torn_bytes});
    }
    // The journal held together: cut every torn segment to its good prefix, so that a later
    // recovery (and a later segment's sync) never meets those bytes again.
    for (const auto& t : torn) {
      ASSIGN_OR_RETURN(auto bytes, store->get(t.key));
      auto put = store->put(t.key, bytes.substr(0, t.valid_bytes));
      if (!put) return put.err();
      ri.torn_bytes += t.torn_bytes;
      logger("ledger")->warn("journal {}: ignored {} torn bytes at its end", t.key, t.torn_bytes);
    }
    st.replaying = false;
  }

  // 3. A new incarnation: fences every attempt the previous one handed out.
  if (l->epoch_ + 1 > kMaxEpoch)
    return error(errc::capacity_exceeded, "ledger: coordinator epochs exhausted");
  journal_record eb;
  eb.type = record_type::epoch_begin;
  eb.epoch = l->epoch_ + 1;
  auto s = l->append(eb);
  if (!s) return s.err();
  if (ri.recovered) {
    auto all = [](const unit_rec&) { return true; };
    for (auto id : detail::leased_units_where(st, all)) {
      journal_record e;
      e.type = record_type::ended;
      e.unit = id;
      e.attempt = st.units[id].attempt;
      e.reason = detail::drop_reason_code(drop_reason::coordinator_restart);
      auto es = l->append(e);
      if (!es) return es.err();
      ++ri.leases_expired;
    }
    // Commits may have been journaled without their events reaching the shards: say
    // them again (shards apply them idempotently).
    for (auto& [id, u] : st.units) {
      if (u.committed.size() > u.trained.size() && st.occupied.count(u.shard))
        detail::emit(st, {ledger_event::kind::unit_committed, u.shard, u.id, u.attempt, {}, 0});
    }
  }
  auto synced = l->sync();
  if (!synced) return synced.err();
  ri.epoch = l->epoch_;
  if (info) *info = ri;
  return l;
}

}  // namespace moerl::ledger
