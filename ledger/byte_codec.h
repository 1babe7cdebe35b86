// Forwarding header, to be removed: the byte codec is common/byte_codec.h (namespace moerl)
// now. It stays only for actors/lease_batch.h, which another change is turning into a
// Cap'n Proto message; include common/byte_codec.h in new code.
#pragma once

#include "common/byte_codec.h"

namespace moerl::ledger::detail {
using moerl::byte_reader;
using moerl::byte_writer;
using moerl::crc32;
}  // namespace moerl::ledger::detail
