// Private to the ledger: one journal record, the unit of the write-ahead log, and its byte
// encoding. Every mutation of the ledger is one record (ledger/LEDGER.md, "Durability");
// the state machine (ledger_state.h) applies them, live and on recovery alike.
#pragma once

#ifndef MOERL_INSIDE_moerl_ledger
#error \
    "ledger/internal/journal_record.h is private to moerl_ledger (ledger/): include its public headers"
#endif

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "ledger/types.h"

namespace moerl::ledger {

// Record types. Values are on disk: never renumber.
enum class record_type : uint8_t {
  epoch_begin = 1,  // a coordinator incarnation starts (epoch)
  unit_added = 2,   // unit, groups
  shard_added = 3,  // name = shard
  leased = 4,       // unit, attempt, name = worker, shard, deadline
  renewed = 5,      // unit, attempt, deadline
  ended = 6,        // unit, attempt, reason: the lease ended without a commit
  reported = 7,     // unit, attempt
  acked = 8,        // unit, attempt, groups = accepted, groups2 = stale
  consumed = 9,     // unit, attempt, group (groups[0]), hand-out id (groups2[0]; absent = 0):
                    // handed and trained at once (a trainer that does not confirm)
  shard_lost = 10,  // name = shard
  // A group's steps with a trainer that confirms (LEDGER.md, "Handed to a trainer"); each
  // has unit, attempt, group (groups[0]) and hand-out id (groups2[0]).
  handed = 11,          // served: committed -> handed
  trained = 12,         // confirmed: handed -> trained
  handed_back = 13,     // its trainer incarnation was lost: handed -> buffered (served again)
  handed_dropped = 14,  // lost and too stale: handed -> dropped[reason]
  // A trainer's claim before it trains (LEDGER.md, "Claimed before trained"): unit, attempt,
  // group (groups[0]), hand-out id (groups2[0]), name = consumer, deadline = its incarnation.
  claimed = 15,        // accepted: the group is handed under that id and claimed by the consumer
  claim_refused = 16,  // refused (re-opened, fenced, held by another): counted, never trained
  consumer_lost = 17,  // name = consumer, deadline = bound: incarnations <= bound are lost
};

// Every record has every field; a type uses the ones its comment above names.
struct journal_record {
  record_type type = record_type::epoch_begin;
  uint64_t seq = 0;  // position in the journal, consecutive from 1
  uint32_t epoch = 0;
  unit_id unit = 0;
  attempt_t attempt = 0;
  std::string name;
  shard_id shard;
  int64_t deadline = 0;
  uint8_t reason = 0;  // drop reason code (drop_reason_code)
  std::vector<uint64_t> groups;
  std::vector<uint64_t> groups2;
};

namespace detail {

// The on-disk code of a drop_reason:: name, and back. Codes are on disk: never renumber.
uint8_t drop_reason_code(const char* reason);
const char* drop_reason_name(uint8_t code);  // code must be valid (decode checks it)

// [u8 type][u64 seq][u32 epoch][u64 unit][u32 attempt][str name][str shard][i64 deadline]
// [u8 reason][u64s groups][u64s groups2], common/byte_codec.h encoding.
std::string encode_record(const journal_record& r);
// errc::malformed_message for bytes that do not decode to exactly one valid record.
result<journal_record> decode_record(const std::string& bytes);

}  // namespace detail
}  // namespace moerl::ledger
