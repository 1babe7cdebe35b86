// The write-ahead half of the durability contract (work_ledger.h): the tail of journal
// records goes to the store, events are released only after it, and every
// ledger.snapshot_every records a snapshot replaces what it covers. A store with appends
// (a local directory) gets every sync's records appended to one segment until the next
// snapshot: one fdatasync per group commit and one file per snapshot period. A store without
// (S3) gets one segment object per sync.
#include <iterator>

#include "ledger/internal/journal_format.h"
#include "ledger/internal/ledger_state.h"
#include "ledger/internal/snapshot_codec.h"
#include "store/object_store.h"

namespace moerl::ledger {

status work_ledger::sync() {
  auto batch = begin_sync();
  if (!batch) return batch.err();
  const status written = store_ ? write_sync(*store_, *batch) : ok_status();
  return end_sync(std::move(*batch), written);
}

result<work_ledger::sync_batch> work_ledger::begin_sync() {
  state& st = *st_;
  if (st.sync_out)
    return error(errc::invalid_argument, "ledger sync: the previous batch is still being written");
  sync_batch b;
  b.open_segment = st.open_segment;
  if (store_ && !st.tail.empty()) {
    for (const auto& r : st.tail) b.bytes += detail::frame(detail::encode_record(r));
    const std::string key = detail::journal_key(opts_.store_prefix, st.tail.front().seq);
    if (!store_->supports_append()) {
      b.write = sync_batch::how::put;
      b.key = key;
    } else if (!st.open_segment.empty()) {
      b.write = sync_batch::how::append;
      b.key = st.open_segment;
    } else {
      b.write = sync_batch::how::start_segment;
      b.key = key;
    }
  }
  if (store_ && st.records_since_snapshot >= opts_.snapshot_every) {
    // Encoded now, when the state is exactly what these records make durable: later calls
    // change it while the batch is written.
    b.snapshot_seq = st.next_seq - 1;
    b.snapshot_key = detail::snapshot_key(opts_.store_prefix, b.snapshot_seq);
    b.snapshot_bytes = detail::frame(detail::encode_snapshot(st, acct_, epoch_, b.snapshot_seq));
    b.records_covered = st.records_since_snapshot;
    b.journal_dir = detail::journal_dir(opts_.store_prefix);
    b.snapshot_dir = detail::snapshot_dir(opts_.store_prefix);
  }
  b.records_written = b.write == sync_batch::how::nothing;
  st.tail_out = std::move(st.tail);
  st.tail.clear();
  st.events_out = std::move(st.events_unsynced);
  st.events_unsynced.clear();
  st.sync_out = true;
  return b;
}

status work_ledger::write_sync(store::object_store& store, sync_batch& b) {
  status wrote;
  switch (b.write) {
    case sync_batch::how::nothing: break;
    case sync_batch::how::put: wrote = store.put(b.key, b.bytes); break;
    case sync_batch::how::append: wrote = store.append(b.key, b.bytes); break;
    case sync_batch::how::start_segment:
      // A segment with this first record exists: an earlier sync of these very records
      // failed part way. Replace it whole, so the retry does not follow its torn bytes.
      wrote = store.get(b.key) ? store.put(b.key, b.bytes) : store.append(b.key, b.bytes);
      if (wrote) b.open_segment = b.key;
      break;
  }
  if (!wrote) return error(errc::io_error, "ledger sync: " + wrote.err().message);
  b.records_written = true;
  if (b.snapshot_key.empty()) return ok_status();
  if (auto put = store.put(b.snapshot_key, b.snapshot_bytes); !put)
    return error(errc::io_error, "ledger snapshot: " + put.err().message);
  b.open_segment.clear();  // every record in it is covered: removed below
  // Everything up to the snapshot is in it: older segments and snapshots go. A crash in
  // between leaves extra objects that recovery skips by sequence number.
  for (const std::string& dir : {b.journal_dir, b.snapshot_dir}) {
    auto keys = store.list(dir);
    if (!keys) continue;
    std::vector<std::string> covered;
    for (const auto& k : *keys) {
      auto seq = detail::key_seq(dir, k);
      if (seq && *seq <= b.snapshot_seq && k != b.snapshot_key) covered.push_back(k);
    }
    (void)store.remove_unsynced(covered);  // best effort: a leftover is harmless
  }
  return ok_status();
}

status work_ledger::end_sync(sync_batch b, const status& written) {
  state& st = *st_;
  if (!st.sync_out) return error(errc::invalid_argument, "ledger sync: no batch is out");
  st.sync_out = false;
  if (!b.records_written) {
    // Nothing of the batch counts: its records and events go back in front of the tail, and
    // the retry starts a new segment (it must not land after torn bytes in this one).
    st.open_segment.clear();
    st.tail.insert(st.tail.begin(), std::make_move_iterator(st.tail_out.begin()),
                   std::make_move_iterator(st.tail_out.end()));
    st.events_unsynced.insert(st.events_unsynced.begin(),
                              std::make_move_iterator(st.events_out.begin()),
                              std::make_move_iterator(st.events_out.end()));
    st.tail_out.clear();
    st.events_out.clear();
    return written ? error(errc::io_error, "ledger sync: the batch was not written") : written;
  }
  st.open_segment = b.open_segment;
  st.tail_out.clear();
  for (auto& e : st.events_out) st.events_ready.push_back(std::move(e));
  st.events_out.clear();
  if (!b.snapshot_key.empty() && written) {
    st.records_since_snapshot -= b.records_covered;  // those appended meanwhile still count
    st.snapshot_seq = b.snapshot_seq;
  }
  return written;
}

std::vector<ledger_event> work_ledger::take_events() {
  if (!store_) (void)sync();
  std::vector<ledger_event> out;
  out.swap(st_->events_ready);
  return out;
}

}  // namespace moerl::ledger
