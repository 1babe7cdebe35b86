// Sharded publication of policy versions (weights/PROTOCOL.md, "Sharded versions"): a trainer
// group's members each push their own ranks' parameter shares (one shard per global rank,
// params.h bytes: rank 0's whole share in the rank layout, the other ranks' expert tensors
// only, since dense tensors are equal on every rank) to the checkpoint caches, and report to member
// 0 only each shard's size, sha256 and the cache that holds it (the step's answer round, a few
// hundred bytes). Member 0 announces the version only when every shard is held; its manifest
// lists one part per shard. Readers fetch the shards in parallel (weights/version_reader.h)
// and assemble the full parameter set with assemble_shards, checked against the version's
// content hash (policy/params.h), which stays one hash of the whole assembled set.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "messages/weights.h"
#include "policy/params.h"
#include "weights/cache_client.h"
#include "weights/version_reader.h"

namespace moerl::job {

// What a member says of one shard it pushed: held by `cache`, or `error` why no cache took it.
struct shard_report {
  uint32_t shard = 0;
  uint64_t bytes = 0;
  std::string sha256;  // hex, of the shard's bytes
  std::string cache;   // endpoint of the cache holding it; "" when none took it
  std::string error;
  nlohmann::json to_json() const;
};
// errc::malformed_message names what is missing or mistyped.
result<shard_report> shard_report_from_json(const nlohmann::json& j);

// Pushes one shard (bytes, their sha256) to a cache: the endpoint holding it, or why none
// took it.
using shard_pusher =
    std::function<result<std::string>(uint64_t version, const std::string& bytes,
                                      const std::string& sha256, const weights::shard_tag& tag)>;

// Shard `rank` of a version from that rank's share (params.h bytes in the rank layout): rank
// 0's share whole; another rank's expert tensors only (those whose shape differs from the
// full layout's): the dense ones are equal on every rank after the all-reduce, so shard 0
// carries them once. errc::invalid_argument names a tensor the full layout lacks.
result<std::string> publication_shard(const policy::param_layout& full_layout, int rank,
                                      const std::string& share);

// Pushes `shares` ({global rank, params.h bytes of its share}) as shards of `version`
// (num_shards in all, publication_shard's bytes), one after another; shard 0 carries
// version_hash (the assembled version's content hash). One report per shard, failures
// included (the caller decides: the version is then not announced through the caches).
std::vector<shard_report> push_shards(const shard_pusher& push, uint64_t version,
                                      const policy::param_layout& full_layout,
                                      const std::vector<std::pair<int, std::string>>& shares,
                                      uint32_t num_shards, const std::string& version_hash);

// The manifest's parts, one per shard in shard order (name "<key>#shard-<k>", offset k, the
// shard's size and sha256), when the reports say every shard 0..num_shards-1 is held by a
// cache. errc::not_found names the shards missing or refused: the version must not be
// announced through the caches.
result<std::vector<messages::weight_part>> sharded_manifest_parts(
    const std::vector<shard_report>& reports, uint32_t num_shards, const std::string& key);

// The full version (params.h bytes in full_layout) from its shards (publication_shard's:
// shard 0 rank 0's share, shard k rank k's expert tensors); errc::malformed_message when a
// shard does not parse, lacks one of its expert tensors, or the result does not match
// version_hash (policy::content_hash; "" checks nothing).
result<std::string> assemble_shards(const policy::param_layout& full_layout,
                                    const std::vector<weights::fetched_shard>& shards,
                                    const std::string& version_hash);

}  // namespace moerl::job
