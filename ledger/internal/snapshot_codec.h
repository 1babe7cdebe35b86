// Private to the ledger: the snapshot, the whole ledger state as one payload, so that
// recovery replays only the journal after it (ledger/LEDGER.md, "Durability").
//
// Format version 4, common/byte_codec.h encoding (version 1 lacks the hand-out ids of
// trained groups; version 2 lacks the handed section at the end and is still written when
// nothing is handed; version 3 lacks the claims section and is still written when no trainer
// claimed anything; all still read):
//   u32 version | u64 last_seq | u32 epoch | u64 next_unit | u64 rr
//   u32 num_shards, per shard: str name | u64 occupied
//   u64s pending | u64 dispatched, committed, in_flight, lost, duplicated, trained
//   u32 num_dropped, per reason: str reason | u64 slots
//   u64 num_units, per unit: u64 id | u64s groups | u8 state | u32 attempt | str worker
//     | str shard | i64 deadline | u8 flags (1 reported, 2 acked) | u64s ack_accepted
//     | u64s ack_stale | u64s todo | u64s committed | u64s trained | u64s hand-out ids
//   version 3: u64 handed (accounting) | u64 num_units, per unit with handed groups:
//     u64 id | u64s handed groups | u64s their hand-out ids
//   version 4: u64 refused_claims | u32 num consumers, per consumer: str name | u64 floor
//     | u64 num claims, per claim: u64 unit | u64 group | str consumer | u64 incarnation
//     | u32 attempt | str shard
#pragma once

#ifndef MOERL_INSIDE_moerl_ledger
#error \
    "ledger/internal/snapshot_codec.h is private to moerl_ledger (ledger/): include its public headers"
#endif

#include <cstdint>
#include <string>

#include "ledger/internal/ledger_state.h"

namespace moerl::ledger::detail {

std::string encode_snapshot(const work_ledger::state& st, const accounting& acct, uint32_t epoch,
                            uint64_t last_seq);
// Fills a fresh `st` and `acct`; errc::malformed_message naming what does not decode or
// names a unit that does not exist.
status decode_snapshot(const std::string& bytes, work_ledger::state& st, accounting& acct,
                       uint32_t& epoch, uint64_t& last_seq);

}  // namespace moerl::ledger::detail
