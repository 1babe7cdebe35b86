// Packs lists of integers into the std::string that a CAF message carries. CAF 0.17 has no
// built-in std::vector<uint64_t> for remote messages, and these lists (group ids of a ledger
// event or shard ack) are too small to deserve a Cap'n Proto message of their own.
// Format: little-endian 8-byte values, nothing else; unpacking refuses a length that is not
// a multiple of 8 (untrusted input).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"

namespace moerl::actors {

std::string pack_u64s(const std::vector<uint64_t>& v);
result<std::vector<uint64_t>> unpack_u64s(const std::string& bytes);

}  // namespace moerl::actors
