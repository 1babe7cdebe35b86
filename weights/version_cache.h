// The checkpoint cache's memory: the newest policy versions, each whole and verified, bounded
// by a number of versions (weights.cache_versions) and a number of bytes
// (weights.cache_bytes). A sharded version (weights/PROTOCOL.md, "Sharded versions") is held
// as one entry per shard, keyed by (version, shard); the version bound counts versions, not
// shards, and evicting a version evicts all of its shards. A version enters only complete (its
// content hash checked by the caller, weights/cache_server.h); inserting one evicts the oldest
// until both bounds hold, so the newest version is always kept. Readers get shared, immutable
// bytes: an entry evicted while a reader still sends from it stays alive until that reader lets go.
// Thread-safe: the server thread serves from it while a replication thread inserts.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"

namespace moerl::weights {

struct cached_version {
  uint64_t version = 0;
  std::shared_ptr<const std::string> bytes;
  std::string content_hash;               // hex sha256 of bytes (store/digest.h)
  uint64_t chunk_bytes = 0;               // every chunk but the last has this size
  std::vector<std::string> chunk_hashes;  // hex sha256 of each chunk, computed once on insert
  int64_t held_unix_ms = 0;               // when the cache came to hold it
  uint32_t shard = 0, num_shards = 1;     // a whole version is shard 0 of 1
  // Shard 0 of a sharded version: the assembled version's content hash as its pusher named it
  // (policy/params.h content_hash; "" when not named). Readers check what they assemble.
  std::string version_hash;

  uint64_t num_chunks() const { return chunk_hashes.size(); }
  uint64_t chunk_offset(uint64_t k) const { return k * chunk_bytes; }
  uint64_t chunk_size(uint64_t k) const;
};

// Splits `bytes` into chunks of chunk_bytes and hashes each (and the whole).
cached_version make_cached_version(uint64_t version, std::shared_ptr<const std::string> bytes,
                                   uint64_t chunk_bytes);

class version_cache {
 public:
  version_cache(uint64_t max_versions, uint64_t max_bytes)
      : max_versions_(max_versions), max_bytes_(max_bytes) {}

  // Adds a complete version (a version held already is kept as is). errc::capacity_exceeded
  // when the version alone is larger than the byte bound; errc::invalid_argument when it is
  // older than every version held while the cache is full (it would be evicted at once).
  status insert(cached_version v);
  // Drops every version held older than `version` (a reader that knows nobody reads them
  // any more frees their memory before the next arrives).
  void erase_older_than(uint64_t version);
  // errc::not_found names the versions held.
  result<std::shared_ptr<const cached_version>> find(uint64_t version, uint32_t shard = 0) const;
  // Every shard of `version` is held (a whole version: it is held).
  bool complete(uint64_t version) const;
  std::vector<uint64_t> versions() const;  // ascending
  uint64_t newest() const;                 // 0 when empty
  uint64_t num_bytes() const;
  uint64_t num_evicted() const;
  uint64_t max_bytes() const { return max_bytes_; }

 private:
  mutable std::mutex mu_;
  uint64_t max_versions_, max_bytes_;
  // (version, shard) -> entry: ascending by version, so the oldest version's shards lead.
  std::map<std::pair<uint64_t, uint32_t>, std::shared_ptr<const cached_version>> held_;
  size_t num_versions_locked() const;
  void evict_oldest_version_locked();
  uint64_t bytes_ = 0, evicted_ = 0;
};

}  // namespace moerl::weights
