// Vocabulary shared by the work-unit ledger, the buffer shards and the sample plane.
// Plain values, no CAF: the node actors (actors/) carry these between processes as
// moerl_messages bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moerl::ledger {

using unit_id = uint64_t;       // assigned by the ledger, starts at 1, never reused
using attempt_t = uint32_t;     // fencing token (messages carry it as UInt32); see below
using group_id = uint64_t;      // prompt group id (messages: groupId); unique inside a unit
using worker_id = std::string;  // node/actor name of a rollout worker
using shard_id = std::string;   // name of a buffer shard

// An attempt is (epoch << 20) | counter, counter >= 1 per unit and epoch. The epoch is the
// coordinator incarnation: it is journaled before the first lease and bumped on every
// recovery, so an attempt handed out by a crashed coordinator (even one whose journal
// record never became durable) is always lower than any attempt the recovered
// coordinator issues. 0 means "no attempt". At most 4095 epochs and 2^20-1 attempts of
// one unit per epoch; beyond that the ledger refuses with errc::capacity_exceeded.
inline constexpr int kAttemptCounterBits = 20;
inline constexpr uint32_t kMaxEpoch = (1u << (32 - kAttemptCounterBits)) - 1;
inline constexpr uint32_t kMaxAttemptCounter = (1u << kAttemptCounterBits) - 1;
inline uint32_t attempt_epoch(attempt_t a) { return a >> kAttemptCounterBits; }
inline uint32_t attempt_counter(attempt_t a) { return a & kMaxAttemptCounter; }

// Lifecycle of a work unit (ledger/LEDGER.md has the diagram). `returned` and `expired`
// are transitions, not resting states: the unit is back in `pending` right after them.
enum class unit_state : uint8_t {
  pending = 0,    // waiting for a worker
  leased = 1,     // a worker holds the current attempt until its deadline
  committed = 2,  // worker reported N samples and the shard acknowledged N
};
const char* unit_state_name(unit_state s);

// Why dispatched sample slots ended without being committed. These are the keys of the
// report's accounting.dropped map.
namespace drop_reason {
inline constexpr const char* returned = "returned";            // worker gave the unit back
inline constexpr const char* lease_expired = "lease_expired";  // deadline passed
inline constexpr const char* worker_dead = "worker_dead";      // worker declared dead
inline constexpr const char* coordinator_restart = "coordinator_restart";  // lease open at a crash
inline constexpr const char* stale_policy =
    "stale_policy";                                      // shard refused: older than max_staleness
inline constexpr const char* shard_lost = "shard_lost";  // committed, untrained, on a lost shard
// Handed to a trainer incarnation that was lost before it confirmed the group, and by then
// older than buffer.max_staleness: not served again.
inline constexpr const char* trainer_lost_stale = "trainer_lost_stale";
}  // namespace drop_reason

// What a worker receives when it leases a unit. Samples it produces carry
// (unit, attempt, seq, policy_version, group_id, index_in_group) with seq in
// [0, num_samples()) and index_in_group in [0, group_size).
struct lease {
  unit_id unit = 0;
  attempt_t attempt = 0;
  worker_id worker;
  shard_id shard;                // the buffer shard that must receive every sample
  int64_t deadline_ms = 0;       // on the ledger's clock
  std::vector<group_id> groups;  // groups to generate (a re-opened unit has fewer)
  uint32_t group_size = 0;       // samples per group
  uint64_t num_samples() const { return uint64_t(groups.size()) * group_size; }
};

// A shard's verdict on one attempt once it holds all of its samples: every group of
// the lease appears in exactly one of the two lists.
struct shard_ack {
  unit_id unit = 0;
  attempt_t attempt = 0;
  shard_id shard;
  std::vector<group_id> accepted_groups;  // admitted whole; become servable on commit
  std::vector<group_id> stale_groups;     // a sample was older than max_staleness: dropped
};

// What a shard did with a committed group it served (ledger/LEDGER.md, "Handed to a
// trainer"): a group is `handed` until its trainer confirms it (`trained`) or the trainer
// incarnation it was handed to is lost (`returned` to the shard's queue and served again, or
// `dropped` as trainer_lost_stale when it became too stale meanwhile).
// A consumer that does not confirm (incarnation 0: tests, tools) has its groups `consumed`:
// handed and trained at once.
enum class handout_step : uint8_t {
  consumed = 0,
  handed = 1,
  trained = 2,
  returned = 3,
  dropped = 4,
};
const char* handout_step_name(handout_step s);

// One step of a group handed to a trainer. The shard produces one per served group and per
// later step of it; the caller must record each in the ledger (work_ledger::record_handout,
// in the order the shard produced them).
struct consumption {
  unit_id unit = 0;
  attempt_t attempt = 0;
  group_id group = 0;
  uint32_t num_samples = 0;  // must be the unit's group_size
  // The shard's id for this hand-out (never 0 from a shard). A consumption re-sent because
  // its reply was lost (the coordinator died after journaling it) carries the same id and is
  // accepted once; a second hand-out of the group has another id and counts as duplicated.
  uint64_t handout = 0;
  handout_step step = handout_step::consumed;
};

// Who a batch is served to: a trainer consumer's name (one per trainer node or trainer
// group, the same across its restarts) and its incarnation (a new one per trainer state:
// higher means newer). Incarnation 0 is a consumer that never confirms: its groups are
// `consumed` (handed and trained at once) as they leave.
struct consumer_ref {
  std::string name;
  uint64_t incarnation = 0;
};

// What the ledger tells buffer shards; the node routes each event to `shard`.
struct ledger_event {
  enum class kind : uint8_t {
    attempt_opened = 0,  // expect `groups` x group_size samples of (unit, attempt)
    attempt_fenced = 1,  // purge staged samples of (unit, attempt) and refuse later ones
    unit_committed = 2,  // staged samples of (unit, attempt) become servable
  };
  kind what = kind::attempt_opened;
  shard_id shard;
  unit_id unit = 0;
  attempt_t attempt = 0;
  std::vector<group_id> groups;  // attempt_opened only
  uint32_t group_size = 0;       // attempt_opened only
};

// A lease that ended without a commit (expiry, worker death).
struct ended_lease {
  unit_id unit = 0;
  attempt_t attempt = 0;
  worker_id worker;
  const char* reason = drop_reason::lease_expired;
};

}  // namespace moerl::ledger
