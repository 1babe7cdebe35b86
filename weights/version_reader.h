// A reader of policy versions: from the least-loaded checkpoint cache that holds the version,
// resuming from the next cache at the chunk it reached when one fails or stops answering, and
// from the durable store when no cache can serve it. Every chunk is checked against its
// sha256 (a mismatch is fetched again, once, and counted) and the whole version against its
// content hash before it is returned, so a partial or corrupt version is never handed out.
// What it read, from where, is counted (bytes_from cache / peer / store).
// A sharded version (weights/PROTOCOL.md, "Sharded versions": shard 0's meta names
// num_shards) is read shard by shard, the shards in parallel (one reader and its sockets per
// shard), each checked against its sha256, then assembled by the caller's shard_assembler.
// Not thread-safe: one reader per thread (each holds its own sockets).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "weights/cache_client.h"
#include "zmq/context.h"

namespace moerl::weights {

struct reader_counters {
  uint64_t bytes_from_cache = 0;
  uint64_t bytes_from_peer =
      0;  // from another reader holding the version (peer serving, weights/FANOUT.md)
  uint64_t bytes_from_store = 0;
  uint64_t num_versions = 0;
  uint64_t num_failovers = 0;         // a cache failed mid-version; the next one resumed
  uint64_t num_chunk_refetches = 0;   // a chunk that did not match its hash, fetched again
  uint64_t num_store_fallbacks = 0;   // versions no cache could serve
  uint64_t bytes_via_shm = 0;         // of bytes_from_cache: read through a same-host file
  uint64_t bytes_via_sealed_shm = 0;  // of bytes_via_shm: a sealed memfd, not hashed again
  uint64_t num_sharded_versions = 0;  // versions assembled from shards
  uint64_t num_shards_read = 0;       // shards of those
  nlohmann::json bytes_from_json() const;
  nlohmann::json to_json() const;
  // Adds every count of `o` (one reader's counts over several readers).
  reader_counters& operator+=(const reader_counters& o);
};

// One shard as a cache held it: a whole version is shard 0 of 1.
struct fetched_shard {
  uint32_t shard = 0, num_shards = 1;
  std::shared_ptr<const std::string> bytes;
  std::string content_hash;  // sha256 hex of bytes (checked)
  std::string version_hash;  // shard 0 of a sharded version: the assembled version's hash, or ""
  std::string transport;     // "shm" or "zmq"
};

// The full version from its shards (in shard order), checked against version_hash (shard
// 0's; "" when its pusher named none). Given by who knows the parameter layout
// (job/weights_feed.h: job/param_slicing.h's assemble_params).
using shard_assembler = std::function<result<std::string>(const std::vector<fetched_shard>& shards,
                                                          const std::string& version_hash)>;

struct fetched_version {
  std::shared_ptr<const std::string> bytes;
  std::string source;     // "cache" or "store"
  std::string transport;  // "shm" (a same-host file), "zmq" (chunks) or "store"
};

// The store's copy of a version when no holder could serve it (from_store checks what it
// reads), counted in `c` (store_fallbacks, versions, bytes_from.store).
result<fetched_version> read_store_copy(const std::function<result<std::string>()>& from_store,
                                        reader_counters& c);

class version_reader {
 public:
  // timeout_ms bounds each request to a cache. same_host_shm: ask caches for a same-host copy
  // (a sealed memfd, weights/shm_copy.h), read in one pass when the cache shares this host.
  version_reader(std::shared_ptr<zmq::zmq_context> ctx, int timeout_ms, bool same_host_shm = false);
  // `caches`: the endpoints to try; `from_store`: the durable copy (it checks what it reads;
  // null: no store fallback, errc::not_found when no cache holds the version).
  result<fetched_version> fetch(uint64_t version, const std::vector<std::string>& caches,
                                const std::function<result<std::string>()>& from_store);
  // Without an assembler a sharded version is not read from the caches (the store copy is).
  void set_assembler(shard_assembler a) { assembler_ = std::move(a); }
  // Every shard of `version` (one entry for a whole version), each from the least-loaded cache
  // holding it, resuming elsewhere on failure, in parallel, each checked against its sha256.
  // errc::not_found names a shard no cache could serve.
  result<std::vector<fetched_shard>> fetch_shards(uint64_t version,
                                                  const std::vector<std::string>& caches);
  const reader_counters& counters() const { return counters_; }

 private:
  struct holder {
    std::string endpoint;
    uint64_t load = 0;
    uint64_t bytes = 0, chunk_bytes = 0, num_chunks = 0;
    uint32_t shard = 0, num_shards = 1;
    std::string content_hash;
    std::string version_hash;
    std::string shm_path;    // a same-host copy the cache offered, or ""
    uint64_t shm_inode = 0;  // its inode when the cache sealed it (0: an older cache's file)
  };
  // One shard (a whole version: shard 0) from `hs`, its holders; errc::not_found when none
  // could serve it whole and matching its sha256.
  result<fetched_shard> read_entry(uint64_t version, uint32_t shard, const std::vector<holder>& hs,
                                   size_t num_caches);
  // The version from the first holder offering a same-host copy; nullopt when none does or
  // the copy cannot be read, or is not sealed and does not match the content hash (the chunks
  // are read then).
  std::optional<std::string> read_same_host_copy(const std::vector<holder>& hs, uint64_t version);
  cache_client* client(const std::string& endpoint);
  void drop(const std::string& endpoint);
  std::vector<holder> holders(uint64_t version, uint32_t shard,
                              const std::vector<std::string>& caches);
  // Fills `out` from chunk *next on; *next advances as chunks arrive. False when the cache
  // failed (the caller resumes elsewhere).
  bool read_chunks(const holder& h, uint64_t version, std::string& out, uint64_t* next);

  std::shared_ptr<zmq::zmq_context> ctx_;
  int timeout_ms_;
  bool same_host_shm_;
  shard_assembler assembler_;
  // The readers of shards 1.. (each used by one thread at a time, kept between versions so
  // their connections are: a new socket per shard and version cost a handshake each).
  std::vector<std::unique_ptr<version_reader>> shard_readers_;
  std::string shm_host_;  // host_identity sent with meta requests when same_host_shm
  cache_connections connections_;
  reader_counters counters_;
};

}  // namespace moerl::weights
