// Packs lists of integers into the std::string that a CAF message carries. CAF 0.17 has no
// built-in std::vector<uint64_t> for remote messages, and these lists (group ids of a ledger
// event or shard ack) are too small to deserve a Cap'n Proto message of their own.
// Format: little-endian 8-byte values, nothing else; unpacking refuses a length that is not
// a multiple of 8 (untrusted input).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ledger/types.h"
#include "common/error.h"

namespace moerl::actors {

std::string pack_u64s(const std::vector<uint64_t>& v);
result<std::vector<uint64_t>> unpack_u64s(const std::string& bytes);

// The ledger events for one shard that one group commit released, in order, as one CAF
// message: one message per event cost the receiving node as much as the coordinator's whole
// ledger work (moerl bench control). Per event, little-endian: u8 kind, u64 unit,
// u32 attempt, u32 group_size, u32 number of groups, that many u64 group ids. `shard` is
// not sent (the receiver is the shard); unpacking sets it to `shard`. Refuses unknown kinds,
// truncation and trailing bytes (untrusted input).
std::string pack_ledger_events(const std::vector<ledger::ledger_event>& events);
result<std::vector<ledger::ledger_event>> unpack_ledger_events(const std::string& bytes, const std::string& shard);

}  // namespace moerl::actors
