// One experience-buffer shard: bounded memory, fencing by attempt, duplicate and
// staleness admission, whole prompt groups served to trainers exactly once.
// ledger/LEDGER.md ("Buffer shard") describes the protocol with the ledger.
//
// Threading: not thread-safe; one owner (a buffer actor or the shard_service loop).
// Deterministic: no clock, no I/O.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/config.h"
#include "common/error.h"
#include "ledger/types.h"
#include "messages/sample.h"

namespace moerl::ledger {

struct shard_options {
  shard_id name;                         // this shard's id (as the ledger knows it)
  uint32_t group_size = 8;               // ledger.group_size
  uint64_t capacity_samples = 4096;      // buffer.capacity_samples: staged + ready
  uint64_t capacity_bytes = 256u << 20;  // buffer.capacity_bytes: estimated payload bytes
  uint64_t max_staleness = 1;            // buffer.max_staleness, in policy versions

  static result<shard_options> from_config(const config& cfg, const shard_id& name);
};

// Counters of what the shard did with every sample it saw. Fenced and duplicate samples
// are extra copies, not dispatched slots, so they live here rather than in the ledger's
// accounting (LEDGER.md explains).
struct shard_stats {
  uint64_t received = 0;       // admit() calls
  uint64_t staged = 0;         // samples admitted into staging
  uint64_t fenced = 0;         // refused: attempt older than the unit's current one
  uint64_t duplicate = 0;      // refused: (unit, attempt, seq) or its group slot seen before
  uint64_t stale_policy = 0;   // samples older than max_staleness (their group is dropped)
  uint64_t rejected_full = 0;  // refused: shard at capacity (producer must wait for credit)
  uint64_t invalid = 0;        // refused: index or group outside the lease
  uint64_t purged = 0;         // staged samples thrown away when their attempt was fenced
  uint64_t served_groups = 0;
  uint64_t served_samples = 0;
  uint64_t batches = 0;
  // Handed to a trainer (LEDGER.md, "Handed to a trainer"): groups served and not confirmed
  // now, and what became of the others.
  uint64_t handed_groups = 0;       // now
  uint64_t confirmed_groups = 0;    // its trainer confirmed them
  uint64_t reserved_groups = 0;     // its trainer incarnation was lost: queued to serve again
  uint64_t trainer_lost_stale = 0;  // lost, and too stale to serve again: dropped
  uint64_t fenced_consumers = 0;    // requests and confirmations of a lost incarnation, refused
  uint64_t resident_samples = 0;    // now: staged + ready
  uint64_t resident_bytes = 0;
  uint64_t peak_samples = 0;  // high-water marks (bounded-memory evidence)
  uint64_t peak_bytes = 0;
  nlohmann::json to_json() const;
};

// A batch for a trainer plus what the ledger must be told about it.
struct served_batch {
  messages::batch batch;              // whole groups; batch_id unique per shard
  std::vector<consumption> consumed;  // one per group: forward to work_ledger
};

class buffer_shard {
 public:
  explicit buffer_shard(shard_options options);
  ~buffer_shard();
  buffer_shard(const buffer_shard&) = delete;
  buffer_shard& operator=(const buffer_shard&) = delete;

  // Offers one sample. Ok: staged (possibly marked stale: see stats). Errors, each naming
  // the sample: errc::stale_attempt (fenced), errc::duplicate, errc::stale_policy (counted
  // toward the attempt; its group will be dropped), errc::capacity_exceeded (not recorded:
  // retry later), errc::invalid_argument (index_in_group/seq/group outside the lease).
  // A sample of a higher attempt than the one known fences the lower one: the ledger
  // only issues attempt a+1 after a is dead.
  status admit(messages::sample s);

  // Applies a ledger event addressed to this shard (others are ignored). Idempotent:
  // the ledger re-sends commits after a coordinator restart.
  void apply(const ledger_event& e);

  // The trainer's current policy version; admission refuses samples with
  // policy_version + max_staleness < version.
  void set_policy_version(uint64_t version);
  uint64_t policy_version() const { return policy_version_; }

  // Acks for attempts whose samples are all here (once per attempt), for the ledger.
  std::vector<shard_ack> take_acks();

  // Up to max_groups committed groups, oldest commit first (groups served again after
  // their trainer was lost first of all), each exactly once. An empty batch when none is
  // ready. For a confirming consumer (incarnation > 0) the groups stay here, `handed`, until
  // confirm() or their consumer's loss; call consumer_seen() for `to` first.
  served_batch serve(uint32_t max_groups, const consumer_ref& to = {});

  // A request or confirmation from `c`. An incarnation newer than the one known for c.name
  // means the older one is lost: its handed groups are released (see consumer_lost) and
  // their steps returned. errc::stale_attempt (counted in fenced_consumers) when c is older
  // than the incarnation known: a lost incarnation is fenced and gets nothing.
  result<std::vector<consumption>> consumer_seen(const consumer_ref& c);
  // The consumer's step made a policy version with batch `batch_id`: its groups are trained
  // (one `trained` step each) and leave the shard. errc::stale_attempt (counted) when the
  // batch is not handed to exactly this incarnation (a late confirmation from a lost one).
  result<std::vector<consumption>> confirm(const consumer_ref& by, uint64_t batch_id);
  // Every incarnation of `name` up to `incarnation` is lost, and fenced from now on: each
  // group handed to one goes back to the front of the queue (`returned`, served again), or
  // is dropped (`dropped`: trainer_lost_stale) when a sample of it is older than
  // max_staleness now. `incarnation` may be a bound no consumer has (the coordinator's).
  std::vector<consumption> consumer_lost(const std::string& name, uint64_t incarnation);
  // Batch `batch_id` never reached its consumer (the send to it failed): its groups go back
  // the same way (`returned` or `dropped`). Nothing when it is not handed.
  std::vector<consumption> undelivered(uint64_t batch_id);

  uint64_t free_samples() const;  // capacity left, in samples (credits to grant)
  size_t num_ready_groups() const;
  size_t num_handed_groups() const { return size_t(stats_.handed_groups); }
  const shard_stats& stats() const { return stats_; }
  const shard_options& options() const { return opts_; }

  struct unit_slot;  // private; defined in buffer_shard.cpp

 private:
  void purge_below(unit_slot& u, attempt_t attempt);
  void maybe_ack(unit_id unit, unit_slot& u);
  void release(uint64_t samples, uint64_t bytes);

  shard_options opts_;
  uint64_t policy_version_ = 0;
  uint64_t next_batch_id_ = 1;
  uint64_t next_handout_ =
      1;  // consumption::handout; a group's attempt tells shard incarnations apart
  shard_stats stats_;
  std::map<unit_id, std::unique_ptr<unit_slot>> units_;
  struct ready_group {
    unit_id unit;
    attempt_t attempt;
    group_id group;
  };
  std::deque<ready_group> ready_;
  std::vector<shard_ack> acks_;
  // Batches served to a confirming consumer and not confirmed: their samples stay resident.
  struct handed_group {
    consumption step;  // as handed
    std::vector<messages::sample> samples;
    uint64_t bytes = 0;
  };
  struct handed_batch {
    consumer_ref to;
    std::vector<handed_group> groups;
  };
  std::map<uint64_t, handed_batch> handed_;  // by batch id
  // Puts a handed batch's groups back (or drops the stale ones): their steps to `out`, the
  // groups to serve again to `again`.
  void take_back(handed_batch& b, std::vector<consumption>& out, std::vector<ready_group>& again);
  std::map<std::string, uint64_t> incarnations_;  // consumer name -> newest incarnation seen
};

// Estimated payload bytes of a sample, for capacity_bytes.
uint64_t sample_bytes(const messages::sample& s);

}  // namespace moerl::ledger
