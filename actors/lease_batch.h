// The reply to a batched lease request (leases_atom): up to actors.lease_batch leases in one
// CAF message. Header-only: it is the coordinator's and the rollout worker's shared wire
// format and needs no translation unit of its own.
//
// Why not N Cap'n Proto `Lease` messages: every lease of one reply has the same worker,
// policy version, task and group size, and a handful of shards; a Cap'n Proto lease carries
// all of them again (~200 bytes, an arena per message). This format states them once and
// costs ~36 bytes per single-group lease. Integers only (no float crosses CAF, as everywhere).
//
// Layout, little-endian, through the ledger's bounds-checked byte codec:
//   "MLB1"                                   magic + format version
//   str worker, u64 policy_version, str task, u32 samples_per_group
//   u32 n_shards, n_shards x (str name, str endpoint)
//   u32 n_leases, n_leases x (u64 unit, u32 attempt, u64 deadline_unix_ms,
//                             u32 shard index, u64s group ids)
// Decoding treats the bytes as untrusted: any short, oversized, out-of-range or trailing
// input is errc::malformed_message naming what was wrong.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ledger/byte_codec.h"
#include "actors/wire_pack.h"
#include "common/error.h"
#include "messages/work.h"

namespace moerl::actors {

inline constexpr char kLeaseBatchMagic[4] = {'M', 'L', 'B', '1'};

// All leases must share worker, policy version, task and samples_per_group (one reply).
inline std::string encode_lease_batch(const std::vector<messages::lease>& leases) {
  ledger::detail::byte_writer w;
  for (char c : kLeaseBatchMagic) w.u8(static_cast<uint8_t>(c));
  const messages::lease first = leases.empty() ? messages::lease{} : leases.front();
  w.str(first.worker);
  w.u64(first.policy_version);
  w.str(first.unit.task);
  w.u32(first.unit.samples_per_group);
  std::map<std::string, uint32_t> index;
  std::vector<const messages::lease*> shard_of;  // first lease naming each shard
  for (const auto& l : leases)
    if (index.emplace(l.shard, static_cast<uint32_t>(shard_of.size())).second) shard_of.push_back(&l);
  w.u32(static_cast<uint32_t>(shard_of.size()));
  for (const auto* l : shard_of) {
    w.str(l->shard);
    w.str(l->shard_endpoint);
  }
  w.u32(static_cast<uint32_t>(leases.size()));
  for (const auto& l : leases) {
    w.u64(l.unit.id);
    w.u32(l.attempt);
    w.u64(l.deadline_unix_ms);
    w.u32(index.at(l.shard));
    w.u64s(l.unit.group_ids);
  }
  return std::move(w.bytes());
}

inline bool is_lease_batch(const std::string& bytes) {
  return bytes.size() >= 4 && bytes.compare(0, 4, kLeaseBatchMagic, 4) == 0;
}

inline result<std::vector<messages::lease>> decode_lease_batch(const std::string& bytes) {
  auto bad = [](const std::string& what) { return error(errc::malformed_message, "lease batch: " + what); };
  if (!is_lease_batch(bytes)) return bad("no MLB1 magic");
  ledger::detail::byte_reader rd(bytes.data() + 4, bytes.size() - 4);
  messages::lease common;
  common.worker = rd.str();
  common.policy_version = rd.u64();
  common.unit.task = rd.str();
  common.unit.samples_per_group = rd.u32();
  uint32_t ns = rd.u32();
  // Each shard entry takes at least 8 bytes, each lease at least 28: a count beyond what
  // is left is damage, not a request to allocate.
  if (!rd.ok() || ns > rd.remaining() / 8) return bad("truncated header or shard table");
  std::vector<std::pair<std::string, std::string>> shards(ns);
  for (auto& [name, ep] : shards) {
    name = rd.str();
    ep = rd.str();
  }
  uint32_t n = rd.u32();
  if (!rd.ok() || n > rd.remaining() / 28) return bad("truncated lease list");
  std::vector<messages::lease> out;
  out.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    messages::lease l = common;
    l.unit.id = rd.u64();
    l.attempt = rd.u32();
    l.deadline_unix_ms = rd.u64();
    uint32_t s = rd.u32();
    l.unit.group_ids = rd.u64s();
    if (!rd.ok()) return bad("lease " + std::to_string(i) + " is truncated");
    if (s >= ns) return bad("lease " + std::to_string(i) + " names shard " + std::to_string(s) + " of " + std::to_string(ns));
    if (l.unit.group_ids.empty()) return bad("lease " + std::to_string(i) + " has no groups");
    l.shard = shards[s].first;
    l.shard_endpoint = shards[s].second;
    out.push_back(std::move(l));
  }
  if (!rd.at_end()) return bad(std::to_string(rd.remaining()) + " trailing bytes");
  if (n > 0 && common.unit.samples_per_group == 0) return bad("samples_per_group is 0");
  return out;
}

// (unit, attempt) pairs of leases a worker gives back in one (giveback_atom, worker, bytes)
// message: pack_u64s of unit0, attempt0, unit1, attempt1, ...
using lease_ids = std::vector<std::pair<uint64_t, uint32_t>>;

inline std::string pack_lease_ids(const lease_ids& ids) {
  std::vector<uint64_t> v;
  v.reserve(2 * ids.size());
  for (const auto& [unit, attempt] : ids) {
    v.push_back(unit);
    v.push_back(attempt);
  }
  return pack_u64s(v);
}

inline result<lease_ids> unpack_lease_ids(const std::string& bytes) {
  auto v = unpack_u64s(bytes);
  if (!v) return error(errc::malformed_message, "give back: " + v.err().message);
  if (v->size() % 2) return error(errc::malformed_message, "give back: a unit without its attempt");
  lease_ids out;
  out.reserve(v->size() / 2);
  for (size_t i = 0; i < v->size(); i += 2) {
    if ((*v)[i + 1] > UINT32_MAX)
      return error(errc::malformed_message, "give back: attempt " + std::to_string((*v)[i + 1]) + " out of range");
    out.emplace_back((*v)[i], static_cast<uint32_t>((*v)[i + 1]));
  }
  return out;
}

}  // namespace moerl::actors
