// The write-ahead half of the durability contract (work_ledger.h): the tail of journal
// records goes to the store, events are released only after it, and every
// ledger.snapshot_every records a snapshot replaces what it covers. A store with appends
// (a local directory) gets every sync's records appended to one segment until the next
// snapshot: one fdatasync per group commit and one file per snapshot period. A store without
// (S3) gets one segment object per sync.
#include "ledger/internal/journal_format.h"
#include "ledger/internal/ledger_state.h"
#include "ledger/internal/snapshot_codec.h"
#include "store/object_store.h"

namespace moerl::ledger {

status work_ledger::sync() {
  state& st = *st_;
  if (!store_) {
    for (auto& e : st.events_unsynced) st.events_ready.push_back(std::move(e));
    st.events_unsynced.clear();
    return ok_status();
  }
  if (!st.tail.empty()) {
    std::string seg;
    for (const auto& r : st.tail) seg += detail::frame(detail::encode_record(r));
    const std::string key = detail::journal_key(opts_.store_prefix, st.tail.front().seq);
    status wrote;
    if (!store_->supports_append()) {
      wrote = store_->put(key, seg);
    } else if (!st.open_segment.empty()) {
      wrote = store_->append(st.open_segment, seg);
    } else if (auto old = store_->get(key); old) {
      // A segment with this first record exists: an earlier sync of these very records
      // failed part way. Replace it whole, so the retry does not follow its torn bytes.
      wrote = store_->put(key, seg);
      if (wrote) st.open_segment = key;
    } else {
      wrote = store_->append(key, seg);
      if (wrote) st.open_segment = key;
    }
    if (!wrote) {
      st.open_segment.clear();
      return error(errc::io_error, "ledger sync: " + wrote.err().message);
    }
    st.tail.clear();
  }
  for (auto& e : st.events_unsynced) st.events_ready.push_back(std::move(e));
  st.events_unsynced.clear();

  if (st.records_since_snapshot >= opts_.snapshot_every) {
    uint64_t last = st.next_seq - 1;
    auto put = store_->put(detail::snapshot_key(opts_.store_prefix, last),
                           detail::frame(detail::encode_snapshot(st, acct_, epoch_, last)));
    if (!put) return error(errc::io_error, "ledger snapshot: " + put.err().message);
    st.records_since_snapshot = 0;
    st.snapshot_seq = last;
    st.open_segment.clear();  // every record in it is <= last: removed below
    // Everything up to `last` is in the snapshot: older segments and snapshots go. A crash
    // in between leaves extra objects that recovery skips by sequence number.
    for (const char* which : {"journal", "snapshot"}) {
      std::string dir = std::string(which) == "journal" ? detail::journal_dir(opts_.store_prefix)
                                                        : detail::snapshot_dir(opts_.store_prefix);
      auto keys = store_->list(dir);
      if (!keys) continue;
      std::vector<std::string> covered;
      for (const auto& k : *keys) {
        auto seq = detail::key_seq(dir, k);
        if (seq && *seq <= last && k != detail::snapshot_key(opts_.store_prefix, last))
          covered.push_back(k);
      }
      (void)store_->remove_unsynced(covered);  // best effort: a leftover is harmless
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

}  // namespace moerl::ledger
