// Private to the ledger: how journal segments and snapshots are laid out in the object
// store (ledger/LEDGER.md, "Durability", is the normative description).
//   <prefix>/journal/<first seq, 16 digits>   frames of records, seq consecutive
//   <prefix>/snapshot/<last seq, 16 digits>   one frame: the whole ledger state
// A frame is [u32 payload length][u32 CRC-32 of payload][payload], little-endian.
#pragma once

#ifndef MOERL_INSIDE_moerl_ledger
#error \
    "ledger/internal/journal_format.h is private to moerl_ledger (ledger/): include its public headers"
#endif

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moerl::ledger::detail {

std::string frame(const std::string& payload);

struct frames_read {
  std::vector<std::string> payloads;  // complete frames with a good CRC, in order
  size_t valid_bytes = 0;             // bytes covered by those frames
  size_t torn_bytes = 0;              // bytes after the first short or damaged frame
};
frames_read read_frames(const std::string& bytes);

std::string journal_dir(const std::string& prefix);
std::string snapshot_dir(const std::string& prefix);
std::string journal_key(const std::string& prefix, uint64_t first_seq);
std::string snapshot_key(const std::string& prefix, uint64_t last_seq);
// The sequence number a key under journal_dir/snapshot_dir ends with; nullopt for
// anything else (foreign files are ignored, not trusted).
std::optional<uint64_t> key_seq(const std::string& dir, const std::string& key);

}  // namespace moerl::ledger::detail
