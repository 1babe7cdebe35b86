// The coordinator's work-unit ledger: leases with fencing, commit on (report N, ack N),
// exact accounting, and a journal + snapshot on the object store that survives a
// coordinator restart. ledger/LEDGER.md describes states, records and invariants.
//
// Threading: not thread-safe. One owner (the coordinator's ledger actor) calls it; every
// call is deterministic given the injected clock and the call sequence.
//
// Durability contract (write-ahead): every mutating call appends journal records to an
// in-memory tail and applies them. sync() writes the tail to the store as one journal
// segment. take_events() releases only events whose records are durable, and a caller
// must not reply to a worker (a lease, a commit) before the sync() that covers it
// succeeded. Without a store, sync() is a no-op and everything is released at once.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "ledger/accounting.h"
#include "ledger/clock.h"
#include "ledger/types.h"

namespace moerl::store {
class object_store;
}

namespace moerl::ledger {

struct journal_record;             // private; ledger/internal/journal_record.h
enum class record_type : uint8_t;  // private; ledger/internal/journal_record.h
struct unit_rec;                   // private; ledger/internal/ledger_state.h

struct ledger_options {
  int64_t lease_timeout_ms = 30000;  // ledger.lease_timeout_ms
  uint32_t group_size = 8;           // ledger.group_size: samples per prompt group
  uint32_t max_groups_per_unit = 4;  // ledger.max_groups_per_unit: bounds a unit
  uint32_t snapshot_every = 1024;    // ledger.snapshot_every: records between snapshots
  // buffer.capacity_samples: a lease is only granted to a shard whose open slots plus
  // committed-but-untrained samples leave room for it (0: unlimited). This is what keeps
  // a shard from filling with partial units that can never commit.
  uint64_t shard_capacity_samples = 0;
  std::string store_prefix = "ledger";  // ledger.store_prefix: key prefix in the store

  // From the `ledger` config section; errc::invalid_config naming a bad key.
  static result<ledger_options> from_config(const config& cfg);
};

// What open() found in the store.
struct recovery_info {
  bool recovered = false;         // false: the store held no ledger, a fresh one started
  uint32_t epoch = 0;             // incarnation of this coordinator (1 for a fresh ledger)
  uint64_t snapshot_seq = 0;      // last record covered by the snapshot used (0: none)
  uint64_t records_replayed = 0;  // journal records applied after the snapshot
  uint64_t torn_bytes = 0;        // bytes of a torn last journal record that were ignored
  uint64_t leases_expired = 0;    // leases open at the crash, expired on recovery
};

// Read-only view of one unit, for status and tests.
struct unit_view {
  unit_id unit = 0;
  unit_state state = unit_state::pending;
  attempt_t attempt = 0;  // current (or last) attempt; 0 if never leased
  worker_id worker;       // holder while leased
  shard_id shard;         // shard of the current/committed attempt
  int64_t deadline_ms = 0;
  bool reported = false;            // leased: the worker reported its samples
  std::vector<group_id> groups;     // every group of the unit, in the order given
  std::vector<group_id> todo;       // groups the next/current attempt generates
  std::vector<group_id> committed;  // groups committed and not dropped since
  std::vector<group_id> trained;    // groups a trainer confirmed
  std::vector<group_id> handed;     // groups served to a trainer, not confirmed yet
  std::vector<group_id> claimed;    // handed groups a trainer claimed (a subset of handed)
};

class work_ledger {
 public:
  // Opens the ledger kept under options.store_prefix in `store`, recovering it from the
  // latest snapshot plus the journal when one exists; starts a fresh one otherwise.
  // Leases that were open at the crash are expired on recovery (reason
  // coordinator_restart) and their units go back to pending; the new epoch fences any
  // sample of theirs. `store` may be null: an in-memory ledger (tests, benchmarks).
  // `clock` and `store` must outlive the ledger.
  static result<std::unique_ptr<work_ledger>> open(const ledger_options& options,
                                                   const clock& clock, store::object_store* store,
                                                   recovery_info* info = nullptr);
  ~work_ledger();
  work_ledger(const work_ledger&) = delete;
  work_ledger& operator=(const work_ledger&) = delete;

  // ---- setup ------------------------------------------------------------------------
  // A new pending unit of 1..max_groups_per_unit distinct prompt group ids.
  result<unit_id> add_unit(const std::vector<group_id>& groups);
  // A buffer shard that can receive units; leases go to live shards round-robin.
  status add_shard(const shard_id& shard);

  // ---- worker side ------------------------------------------------------------------
  // Leases the oldest pending unit to `worker`: new attempt, deadline now + lease timeout.
  // errc::not_found when nothing is pending; errc::capacity_exceeded when no shard lives.
  result<lease> acquire(const worker_id& worker);
  // Batched leasing: up to `max_units` leases for `worker` in one call, each exactly what
  // acquire() would give (own attempt and deadline; shard round-robin under
  // buffer.capacity_samples, so a batch never overfills a shard). Stops at the first unit
  // that cannot be leased and returns what it got; the error of that first refusal only
  // when not even one unit was leased. errc::invalid_argument for max_units == 0.
  result<std::vector<lease>> acquire_batch(const worker_id& worker, uint32_t max_units);
  // Moves the deadline to now + lease timeout. errc::stale_attempt when (unit, attempt) is
  // not the current lease of `worker`; errc::not_found for an unknown unit.
  result<int64_t> renew(unit_id unit, attempt_t attempt, const worker_id& worker);
  // The worker gives the unit back unfinished (drain): pending again, slots dropped as
  // `returned`, the attempt fenced.
  status give_back(unit_id unit, attempt_t attempt, const worker_id& worker);
  // The worker produced all num_samples samples of the attempt. num_samples must equal the
  // lease's num_samples() (errc::invalid_argument otherwise). Returns the unit's state
  // afterwards: committed when the shard's ack was already in.
  result<unit_state> report(unit_id unit, attempt_t attempt, const worker_id& worker,
                            uint64_t num_samples);

  // ---- shard side -------------------------------------------------------------------
  // The shard holds all samples of the attempt. The groups must be exactly the lease's
  // groups. Commits when the worker's report is also in.
  result<unit_state> record_ack(const shard_ack& ack);
  // A trainer received a group and is not going to confirm it: handed and trained at once.
  // Counts `trained`; a group handed out twice, or handed out after its shard was declared
  // lost, counts as duplicated (and is an error return).
  status record_consumed(const consumption& c);
  // One step of a group with a trainer (LEDGER.md, "Handed to a trainer"), by c.step:
  // consumed (as record_consumed), handed (committed -> handed; a second hand-out counts as
  // duplicated, as above), trained (handed -> trained), returned (handed -> buffered: served again)
  // or dropped (handed -> dropped[trainer_lost_stale]). A step for a group that is not handed under
  // c.handout is refused with errc::stale_attempt and changes nothing (a late confirmation
  // from a lost trainer incarnation), unless it is the same step sent again (ok, no change).
  status record_handout(const consumption& c);
  // The shard and its unconsumed samples are gone: every committed group it held that no
  // trainer received is dropped (shard_lost) and its unit re-opened with just those groups;
  // open leases that target the shard are expired. Returns the re-opened units.
  result<std::vector<unit_id>> shard_lost(const shard_id& shard);

  // ---- trainer side: claimed before trained (LEDGER.md, "Claimed before trained") -------
  // Trainer incarnation `by` got these groups (each as its shard served it: unit, attempt,
  // group, hand-out id; num_samples = group_size) and asks to train them. Returns, per group,
  // whether it may: true when the group is committed, untrained, of the unit's current
  // attempt, and not handed or handed under this hand-out (or under an earlier one of a lost
  // predecessor of `by`); the group is then handed under this id and claimed by `by`, and
  // losing its shard no longer re-opens it. False (counted in refused_claims, never to be
  // trained) for a group the ledger re-opened, one held by another consumer, and every group
  // of an incarnation below the newest `by.name` claimed with or below a consumer_lost bound.
  // A claim from an incarnation newer than any before is consumer_lost(name, incarnation - 1)
  // first. Claiming again what `by` holds is true and changes nothing.
  // errc::invalid_argument for incarnation 0 or an empty name (such a consumer never confirms).
  result<std::vector<bool>> claim(const consumer_ref& by, const std::vector<consumption>& groups);
  // `by`'s step made a policy version with these groups it claimed: they are trained, also
  // when their shard is gone (the shard's own `trained` step, if it comes, is then a no-op).
  // Groups not claimed by exactly `by` under that hand-out (released, or `by` was fenced) are
  // skipped. Returns how many became trained.
  result<uint64_t> confirm_claimed(const consumer_ref& by, const std::vector<consumption>& groups);
  // Every incarnation of trainer consumer `name` up to `bound` is lost: their claims are
  // refused from now on, and the groups they claimed from a shard that is gone are dropped
  // (shard_lost) and re-opened (those of a live shard come back through its `returned` steps).
  // Returns the units that became pending.
  result<std::vector<unit_id>> consumer_lost(const std::string& name, uint64_t bound);

  // ---- time and failure detection ----------------------------------------------------
  // Expires every lease whose deadline is <= clock.now_ms().
  std::vector<ended_lease> expire_due();
  // The worker is gone (monitor/heartbeat): all of its leases expire now.
  std::vector<ended_lease> worker_dead(const worker_id& worker);

  // ---- durability and outputs ---------------------------------------------------------
  // Writes journal records appended since the last sync as one segment, and a snapshot
  // when snapshot_every records accumulated since the last one. errc::io_error on a store
  // failure: the tail is kept and the next sync retries it.
  status sync();

  // sync() in three steps, for an owner that writes the journal off its own thread (the
  // coordinator: an fdatasync on its actor thread held up every request queued behind it).
  // begin_sync() takes the tail (and encodes the snapshot when one is due); write_sync()
  // writes the batch (any thread: it touches only the batch and the store); end_sync()
  // applies the outcome on the owner's thread: on success the batch's events go to
  // take_events(); on failure its records and events go back in front of the tail, as if
  // begin_sync() had not run. Calls that change the ledger may run meanwhile (their records
  // wait for the next batch). One batch at a time: sync() and begin_sync() refuse while one
  // is out.
  struct sync_batch {
    enum class how { nothing, put, append, start_segment };
    how write = how::nothing;
    std::string key;    // put / start_segment: the new segment; append: the open segment
    std::string bytes;  // the records' frames
    // A snapshot due after these records (empty: none), its key, and the journal and
    // snapshot directories whose objects it covers (removed once it is written).
    std::string snapshot_key, snapshot_bytes, journal_dir, snapshot_dir;
    uint64_t snapshot_seq = 0;
    uint64_t records_covered = 0;  // records_since_snapshot when the snapshot was encoded
    // Outcome, set by write_sync (nothing to write: already true).
    bool records_written = false;
    std::string open_segment;  // the segment the next append goes to ("" : start one)
  };
  result<sync_batch> begin_sync();
  store::object_store* store() const { return store_; }  // nullptr: none (tests)
  static status write_sync(store::object_store& store, sync_batch& batch);
  status end_sync(sync_batch batch, const status& written);
  // Events for shards whose records are durable, in order.
  std::vector<ledger_event> take_events();

  // ---- inspection -------------------------------------------------------------------
  const accounting& counters() const { return acct_; }
  // Recomputes every bucket from the units and compares with the counters.
  status check_invariant() const;
  std::optional<unit_view> find(unit_id unit) const;
  size_t num_units() const;
  size_t num_pending() const;
  size_t num_leased() const;
  // Leased units per worker, from the leased-unit index: what the `nodes` view shows, without
  // the walk over every unit the run created that it cost before (the coordinator answers
  // `nodes` twice a second under `moerl up`).
  std::map<worker_id, uint32_t> leases_per_worker() const;
  uint32_t epoch() const { return epoch_; }
  const ledger_options& options() const { return opts_; }

  struct state;  // private; ledger/internal/ledger_state.h

 private:
  work_ledger(const ledger_options& options, const clock& clock, store::object_store* store);
  // Appends a record to the journal tail and applies it.
  status append(const journal_record& r);
  // The unit a consumption names, checked (group of the unit, group_size samples).
  result<const unit_rec*> consumed_unit(const consumption& c) const;
  // A group leaves its shard for a trainer: record_consumed (type consumed) and the handed
  // step (type handed) share the checks and the duplicate counting.
  status record_served(const consumption& c, record_type type);
  // Ends each of these leases (reason a drop_reason::) and returns those it ended; the
  // one loop behind expire_due() and worker_dead().
  std::vector<ended_lease> end_leases(const std::vector<unit_id>& units, const char* reason);
  // Whether `by` may claim group c (the rules of claim()); `why` says why not.
  bool claimable(const unit_rec& u, const consumer_ref& by, const consumption& c,
                 std::string* why) const;
  // The ids of the pending units, for the units a record re-opened.
  std::set<unit_id> pending_ids() const;

  ledger_options opts_;
  const clock& clock_;
  store::object_store* store_;
  uint32_t epoch_ = 0;
  accounting acct_;
  std::unique_ptr<state> st_;
};

}  // namespace moerl::ledger
